-- Statements of bench/headers_check.py: a large outbox, and the ways of adding the
-- headers constraint to it.

-- name: check_drop
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_check;

-- name: check_fill
-- Rows as producer_lib writes them (headers a small object), over 16 shards.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
SELECT gen_random_uuid(), 'fill', 'k' || mod(n, 1000), mod(n, 16), 'Filled',
       convert_to(repeat('x', 300), 'UTF8'), '{"content-type": "application/json"}'::jsonb
FROM generate_series(1, %(rows)s) AS n;

-- name: check_add_not_valid
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_headers_check
    CHECK (jsonb_typeof(headers) = 'object') NOT VALID;

-- name: check_validate
ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_headers_check;

-- name: check_add
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_headers_check
    CHECK (jsonb_typeof(headers) = 'object');

-- name: check_writer_insert
-- One producer's insert, while the ALTER runs: how long it waits is what writers pay.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload)
VALUES (gen_random_uuid(), 'fill', 'writer', 0, 'Written', '\x00');

-- name: check_analyze
VACUUM ANALYZE outbox_events;
