-- Test-only statements of the operations tests (tests/support/ops.py), Postgres.

-- name: ops_park
-- Parks rows the way a relay leaves them after failing sends (set-up for the admin CLI).
UPDATE outbox_events SET status = 'parked', attempts = 3, last_error = %(error)s
WHERE id = ANY(%(ids)s::bigint[]);

-- name: ops_backdate
-- Makes rows look older: created this many seconds earlier.
UPDATE outbox_events SET created_at = created_at - %(seconds)s * interval '1 second'
WHERE id = ANY(%(ids)s::bigint[]);

-- name: ops_rows
-- With the rows retention=keep moved into outbox_published, published.
SELECT id, event_id::text, topic, key, status, attempts, published_at IS NOT NULL
FROM outbox_events
UNION ALL
SELECT id, event_id::text, topic, key, 'pending', attempts, true FROM outbox_published
ORDER BY 1;

-- name: ops_publish
-- Moves rows into outbox_published, published and kept (retention=keep), as a relay does.
WITH done AS (
    DELETE FROM outbox_events WHERE id = ANY(%(ids)s::bigint[])
    RETURNING id, event_id, topic, key, shard, event_type, payload, headers, created_at,
              attempts, last_error, tenant
)
INSERT INTO outbox_published (id, event_id, topic, key, shard, event_type, payload, headers,
                              created_at, attempts, last_error, published_at, tenant)
SELECT id, event_id, topic, key, shard, event_type, payload, headers, created_at, attempts,
       last_error, now(), tenant
FROM done;
