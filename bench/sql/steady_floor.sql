-- The cheapest cycle the outbox schema allows (bench/steady_floor.py): not a relay.

-- name: floor_take
-- One statement a cycle: delete up to $1 pending rows in id order and return what a
-- record needs. A crash between it and the acks loses the rows; a safe relay needs at
-- least this statement's work (a claim whose settle rides it), so its cost is a floor.
DELETE FROM outbox_events
WHERE id IN (SELECT id FROM outbox_events WHERE status = 'pending'
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING topic, key, payload;

-- name: floor_read
-- The at-least-once floor (--settle): read up to $1 pending rows in id order without
-- changing them; floor_settle removes them once Kafka has acked them, so a crash between
-- the two sends them again instead of losing them. One loop, so no row is read twice
-- while in flight: the fewest statements a relay that loses nothing needs.
SELECT id, topic, key, payload FROM outbox_events
WHERE status = 'pending' ORDER BY id LIMIT $1;

-- name: floor_settle
DELETE FROM outbox_events WHERE id = ANY($1::bigint[]);
