-- The cheapest cycle the outbox schema allows (bench/steady_floor.py): not a relay.

-- name: floor_take
-- One statement a cycle: delete up to $1 pending rows in id order and return what a
-- record needs. A crash between it and the acks loses the rows; a safe relay needs at
-- least this statement's work (a claim whose settle rides it), so its cost is a floor.
DELETE FROM outbox_events
WHERE id IN (SELECT id FROM outbox_events WHERE status = 'pending'
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING topic, key, payload;
