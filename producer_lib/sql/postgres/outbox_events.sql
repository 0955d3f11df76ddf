-- Queries on outbox_events, Postgres dialect (psycopg named parameters).

-- name: outbox_insert
-- One event. lock_key NULL skips the per-key lock: pg_advisory_xact_lock is strict, so
-- a NULL argument returns NULL without locking. The lock is taken in the FROM subquery,
-- before the row's identity value is drawn, so ids of one key follow commit order.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at)
SELECT %(event_id)s, %(topic)s, %(key)s, %(shard)s, %(event_type)s, %(payload)s,
       %(headers)s::jsonb,
       COALESCE(%(available_at)s::timestamptz, now() + %(delay_s)s * interval '1 second')
FROM (SELECT pg_advisory_xact_lock(%(lock_ns)s::int, %(lock_key)s::int)) AS per_key_lock;

-- name: outbox_insert_batch
-- Many events in one round trip. Locks are taken first, in sorted order so that two
-- batches never deadlock; ORDER BY ord makes identity values follow the caller's order
-- (volatile target-list expressions are evaluated after the sort).
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at)
SELECT e.event_id, e.topic, e.key, e.shard, e.event_type, e.payload, e.headers::jsonb,
       COALESCE(e.available_at, now() + e.delay_s * interval '1 second')
FROM (
    SELECT count(pg_advisory_xact_lock(%(lock_ns)s::int, k)) AS locked
    FROM (SELECT DISTINCT unnest(%(lock_keys)s::int[]) AS k ORDER BY 1) AS keys
) AS per_key_locks,
unnest(
    %(event_ids)s::uuid[], %(topics)s::text[], %(keys)s::text[], %(shards)s::smallint[],
    %(event_types)s::text[], %(payloads)s::bytea[], %(headers)s::text[],
    %(available_ats)s::timestamptz[], %(delays_s)s::float8[]
) WITH ORDINALITY AS e(event_id, topic, key, shard, event_type, payload, headers,
                       available_at, delay_s, ord)
ORDER BY e.ord;

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
