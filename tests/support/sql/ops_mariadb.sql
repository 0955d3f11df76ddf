-- Test-only statements of the operations tests (tests/support/ops.py), MariaDB.

-- fragment: listed
id IN (SELECT l.id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id bigint PATH '$')) AS l)

-- name: ops_park
-- Parks rows the way a relay leaves them after failing sends (set-up for the admin CLI).
UPDATE outbox_events SET status = 'parked', attempts = 3, last_error = %(error)s
WHERE {{listed}};

-- name: ops_backdate
-- Makes rows look older: created this many seconds earlier.
UPDATE outbox_events
SET created_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(seconds)s * 1000000), created_at)
WHERE {{listed}};

-- name: ops_rows
-- With the rows retention=keep moved into outbox_published, published.
SELECT id, event_id, topic, `key`, status, attempts, published_at IS NOT NULL
FROM outbox_events
UNION ALL
SELECT id, event_id, topic, `key`, 'pending', attempts, 1 FROM outbox_published
ORDER BY 1;

-- name: ops_publish
-- Marks rows published and kept (retention=keep), as a relay leaves rows whose payload is
-- larger than retention_move_max_bytes.
UPDATE outbox_events SET published_at = UTC_TIMESTAMP(6) WHERE {{listed}};
