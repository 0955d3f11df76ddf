-- Statements of bench/published_history.py: an outbox of kept rows from before migration
-- 0005, what the migration locks while it moves them, and the purge that follows.

-- name: history_fill
-- Rows as a retention=keep relay left them before 0005: published, over the last week.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers,
                           published_at)
SELECT gen_random_uuid(), 'fill', 'k' || mod(n, 1000), mod(n, 16), 'Filled',
       convert_to(repeat('x', 300), 'UTF8'), '{"content-type": "application/json"}'::jsonb,
       now() - mod(n, 604800) * interval '1 second'
FROM generate_series(1, %(rows)s) AS n;

-- name: history_analyze
VACUUM ANALYZE outbox_events;

-- name: history_writer_insert
-- One producer's insert while the migration runs.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload)
VALUES (gen_random_uuid(), 'fill', 'writer', 0, 'Written', '\x00');

-- name: history_claim_probe
-- What a claim reads while the migration runs (the unpublished rows of a shard).
SELECT count(*) FROM (SELECT id FROM outbox_events WHERE shard = 0 AND published_at IS NULL
                      ORDER BY id LIMIT 100) AS c;

-- name: history_migrator_locks
-- The relation locks the migrating session holds or waits for, by application_name.
SELECT DISTINCT coalesce(c.relname, l.relation::text), l.mode, l.granted
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_class c ON c.oid = l.relation
WHERE a.application_name = %(app)s AND l.locktype = 'relation';

-- name: history_counts
SELECT (SELECT count(*) FROM outbox_published), (SELECT count(*) FROM outbox_events);
