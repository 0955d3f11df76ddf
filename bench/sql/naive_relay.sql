-- The naive relay of bench/compare/naive_relay.py: a hand-written polling loop, one row per
-- transaction, held open (row locked) while the row's send to Kafka is awaited.

-- name: naive_claim_one
SELECT id, event_id::text, topic, key, event_type, payload, headers::text
FROM outbox_events
WHERE published_at IS NULL AND status = 'pending' AND available_at <= now()
ORDER BY id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: naive_delete
DELETE FROM outbox_events WHERE id = %(id)s;
