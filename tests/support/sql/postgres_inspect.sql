-- Postgres-only read-back queries for tests.

-- name: test_order_insert
INSERT INTO test_orders (id, customer) VALUES (%(id)s, %(customer)s);

-- name: outbox_commit_order
-- Commit order from the commit timestamps (track_commit_timestamp=on in scripts/services).
SELECT id, key FROM outbox_events ORDER BY pg_xact_commit_timestamp(xmin), id;

-- name: schema_columns
SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, ''),
       is_identity, coalesce(identity_generation, '')
FROM information_schema.columns
WHERE table_schema = 'public' AND table_name <> 'outbox_schema_migrations'
  AND table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)
ORDER BY table_name, column_name;

-- name: schema_indexes
SELECT tablename, indexname, indexdef FROM pg_indexes
WHERE schemaname = 'public' AND tablename <> 'outbox_schema_migrations'
  AND tablename NOT IN (SELECT relname FROM pg_class WHERE relispartition)
ORDER BY tablename, indexname;

-- name: schema_constraints
-- NOT VALID is the state of the rows, not of the schema: a migrated database's constraint
-- may be, a fresh one's is not.
SELECT conrelid::regclass::text, conname,
       regexp_replace(pg_get_constraintdef(oid), ' NOT VALID$', '')
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace
  AND conrelid::regclass::text <> 'outbox_schema_migrations'
  AND conrelid NOT IN (SELECT oid FROM pg_class WHERE relispartition)
ORDER BY 1, 2;

-- name: schema_settings
SELECT name, value FROM outbox_settings ORDER BY name;

-- name: migration_forge
INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x');

-- name: migration_tamper
UPDATE outbox_schema_migrations SET checksum = 'tampered' WHERE version = 1;

-- name: outbox_delays
SELECT key, extract(epoch FROM available_at - created_at), available_at
FROM outbox_events ORDER BY id;

-- name: outbox_row_state
-- Per row: what settle wrote, and seconds until available_at on the database clock.
-- Rows retention=keep moved into outbox_published are published (available_at: 0).
SELECT id, attempts, status, last_error, published_at IS NOT NULL,
       extract(epoch FROM available_at - now())::float8
FROM outbox_events
UNION ALL
SELECT id, attempts, 'pending', last_error, true, 0.0::float8 FROM outbox_published
ORDER BY 1;

-- name: lease_remaining
-- Seconds until each lease ends on the database clock (NULL once released).
SELECT shard, owner, token,
       CASE WHEN lease_until = '-infinity' THEN NULL
            ELSE extract(epoch FROM lease_until - now())::float8 END
FROM outbox_relay_leases ORDER BY shard;

-- name: notify_listener_kill
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = 'outbox-relay-notify' AND datname = current_database();

-- name: notify_listener_count
SELECT count(*) FROM pg_stat_activity
WHERE application_name = 'outbox-relay-notify' AND datname = current_database();

-- name: outbox_analyze
ANALYZE outbox_events;

-- name: outbox_mark_published_below
-- Marks published as a retention=keep relay would, without the statistics noticing.
UPDATE outbox_events SET published_at = now() WHERE id < %(below)s;

-- name: outbox_fill
-- Many pending rows at once, spread over 16 shards and 1000 keys.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
SELECT gen_random_uuid(), 'fill', 'k' || mod(n, 1000), mod(n, 16), 'Filled',
       convert_to(repeat('x', 300), 'UTF8'), '{}'::jsonb
FROM generate_series(1, %(rows)s) AS n;

-- name: outbox_fill_tenants
-- As outbox_fill, all of tenant A; then, on keys of their own, a few rows of tenant B and
-- a few of no tenant in every shard.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, tenant)
SELECT gen_random_uuid(), 'fill', 'k' || mod(n, 1000), mod(n, 16), 'Filled',
       convert_to(repeat('x', 300), 'UTF8'), '{}'::jsonb, 'A'
FROM generate_series(1, %(rows)s) AS n
UNION ALL
SELECT gen_random_uuid(), 'fill', 'late-' || n, mod(n, 16), 'Filled',
       convert_to(repeat('x', 300), 'UTF8'), '{}'::jsonb, CASE WHEN n < 32 THEN 'B' END
FROM generate_series(0, 63) AS n;

-- name: outbox_autovacuum_off
-- Dead rows stay until the test is done with them.
ALTER TABLE outbox_events SET (autovacuum_enabled = false);

-- name: outbox_tenant_drained
-- A tenant's backlog gone from outbox_events as a settle under retention=keep leaves it
-- (moved into outbox_published), before vacuum: its index entries are all still there,
-- pointing at dead rows.
DELETE FROM outbox_events WHERE tenant = %(tenant)s;

-- name: outbox_id_quantile
SELECT percentile_disc(%(q)s) WITHIN GROUP (ORDER BY id) FROM outbox_events;

-- name: server_setting
SELECT current_setting(%(name)s);

-- name: outbox_tenant_index_drop
-- An adopted schema changed by hand: an index the fair claim needs is gone.
DROP INDEX outbox_events_tenant_idx;

-- name: outbox_attempts_default_change
ALTER TABLE outbox_events ALTER COLUMN attempts SET DEFAULT 1;

-- name: outbox_settings_clear
DELETE FROM outbox_settings;

-- name: outbox_headers_forge
-- A row's headers naming the relay's own headers, as a writer other than producer_lib
-- (which refuses them) could store them.
UPDATE outbox_events
SET headers = headers || jsonb_build_object(
    'event_id', %(forged)s::text, 'EVENT_TYPE', 'Forged', 'x-user', 'kept');

-- name: notify_listener_pid
SELECT pid FROM pg_stat_activity
WHERE application_name = 'outbox-relay-notify' AND datname = current_database();

-- name: notify_send
-- Any role may NOTIFY the relay's channel, with any payload.
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: outbox_set_topic
-- A topic producer_lib would refuse, written past it (any role with UPDATE can).
UPDATE outbox_events SET topic = %(topic)s WHERE id = %(id)s;

-- name: outbox_headers_check_drop
-- The table as it was before 0004_headers_check.sql, for rows written before it.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_check;

-- name: outbox_insert_hostile
-- A row written around producer_lib, by any role with INSERT on the table.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
VALUES (gen_random_uuid(), %(topic)s, %(key)s, %(shard)s, 'Hostile', %(payload)s,
        %(headers)s::jsonb)
RETURNING id;

-- name: outbox_headers_set
UPDATE outbox_events SET headers = %(headers)s::jsonb WHERE id = %(id)s;

-- name: outbox_id_of_event
SELECT id FROM outbox_events WHERE event_id = %(event_id)s;

-- name: outbox_sequence_cache
-- A sequence with a cache: a session may hand out an id below another's later.
ALTER SEQUENCE outbox_events_id_seq CACHE 20;

-- name: snapshot_open
-- Takes a REPEATABLE READ snapshot (run first in a transaction) on a table that is not
-- the outbox.
SELECT count(*) FROM outbox_settings;

-- name: outbox_lock_as_vacuum
-- The lock VACUUM and ANALYZE hold on the table while they run (run in a transaction).
LOCK TABLE outbox_events IN SHARE UPDATE EXCLUSIVE MODE;

-- name: transaction_prepare
PREPARE TRANSACTION 'outbox-floor-test';

-- name: transaction_commit_prepared
COMMIT PREPARED 'outbox-floor-test';

-- name: transaction_rollback_prepared
ROLLBACK PREPARED 'outbox-floor-test';

-- name: leases_lapse
-- Time passes for the lease holder (paused or dead): every lease has expired.
UPDATE outbox_relay_leases SET lease_until = now() - interval '1 second'
WHERE owner IS NOT NULL;

-- name: replicas_lapse
UPDATE outbox_relay_replicas SET seen_until = now() - interval '1 second';

-- name: outbox_backoff_end
-- Time passes for rows backing off after a failure: each is due again.
UPDATE outbox_events SET available_at = now() - interval '1 second'
WHERE status = 'pending' AND attempts > 0 AND published_at IS NULL;

-- name: published_rows
-- retention=keep's history: each row with the partition it is in.
SELECT id, event_id::text, tableoid::regclass::text FROM outbox_published ORDER BY id;

-- name: published_partitions
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'outbox_published'::regclass ORDER BY 1;

-- name: published_dead_tuples
-- Dead tuples the statistics count in the history's partitions (the default one included).
SELECT coalesce(sum(s.n_dead_tup), 0)::bigint FROM pg_stat_user_tables s
WHERE s.relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'outbox_published'::regclass);

-- name: published_default_dead_tuples
SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
WHERE relid = 'outbox_published_default'::regclass;

-- name: stats_flush
-- This session's table statistics reach pg_stat_user_tables now, not within a second.
SELECT pg_stat_force_next_flush();

-- name: published_hold
-- A transaction that reads the history holds ACCESS SHARE on it (and its partitions)
-- until it ends: DDL on a partition must wait for it.
SELECT count(*) FROM outbox_published;

-- name: published_settle_lock
-- The lock a settle's INSERT into the history holds until it commits.
LOCK TABLE outbox_published IN ROW EXCLUSIVE MODE;

-- name: published_default_age
-- Ages every row of the DEFAULT partition by a day (as if settled while no partition
-- covered the time, a day ago).
UPDATE outbox_published_default SET published_at = published_at - interval '1 day';

-- name: published_rotate_patient
-- One rotation, as the purge round runs it, with 20 s for the locks it may wait for.
SELECT created, dropped, skipped FROM outbox_published_rotate(%(retention_s)s::float8, 1, 3, 20000);

-- name: published_rotate_drop
-- As if `outbox-relay migrate` never installed the rotation (an Alembic-made schema).
DROP FUNCTION outbox_published_rotate(float8, bigint, bigint, integer);

-- name: outbox_rows_kept
-- Every committed row, in id order: those still in outbox_events and those retention=keep
-- moved into outbox_published.
SELECT id, event_id, topic, key FROM outbox_events
UNION ALL
SELECT id, event_id, topic, key FROM outbox_published
ORDER BY 1;

-- name: outbox_rows_all
-- outbox_rows' columns for every committed row: those still in outbox_events and those
-- retention=keep moved into outbox_published (pending there, with their published_at).
SELECT id, event_id, topic, key, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events
UNION ALL
SELECT id, event_id, topic, key, shard, event_type, payload, headers, attempts, 'pending',
       published_at, last_error
FROM outbox_published
ORDER BY 1;

-- Moving every clock column back by :s seconds is the clock moving on by as much: leases,
-- heartbeats, delays and retention expire without a test waiting for them.

-- name: rewind_outbox_events
UPDATE outbox_events SET created_at = created_at - make_interval(secs => %(s)s),
       available_at = available_at - make_interval(secs => %(s)s),
       published_at = published_at - make_interval(secs => %(s)s);

-- name: rewind_outbox_published
UPDATE outbox_published SET created_at = created_at - make_interval(secs => %(s)s),
       published_at = published_at - make_interval(secs => %(s)s);

-- name: rewind_outbox_idempotency
UPDATE outbox_idempotency SET created_at = created_at - make_interval(secs => %(s)s);

-- name: rewind_outbox_relay_leases
UPDATE outbox_relay_leases SET lease_until = lease_until - make_interval(secs => %(s)s);

-- name: rewind_outbox_relay_replicas
UPDATE outbox_relay_replicas SET started_at = started_at - make_interval(secs => %(s)s),
       seen_until = seen_until - make_interval(secs => %(s)s);

-- name: rewind_processed_events
UPDATE processed_events SET processed_at = processed_at - make_interval(secs => %(s)s);

-- name: outbox_available_epoch
SELECT id, extract(epoch FROM available_at)::float8 FROM outbox_events ORDER BY id;

-- name: outbox_created_at_utc
-- Each row's created_at as RFC 3339 UTC text, whether it is still in outbox_events or
-- retention=keep moved it into outbox_published.
SELECT event_id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
FROM outbox_events
UNION ALL
SELECT event_id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
FROM outbox_published;

-- name: template_migrated_minutes_ago
-- The template of the migrated test databases, as if migrated ten minutes ago: migration 0005
-- gives a fresh database a partition of outbox_published from the epoch to the moment it
-- ran, which no row published later can fall into, but a test that moves its rows' clocks
-- back (Backend.rewind) a few seconds after the template was made would move them into
-- it. An empty one is made again ending ten minutes earlier (well inside any retention a
-- test rotates with), named as the relay names
-- partitions (outbox_published_p<from>_<to>, seconds since the epoch).
DO $template$
DECLARE
    made text;
    bound bigint := floor(extract(epoch FROM now() - interval '10 minutes'))::bigint;
BEGIN
    SELECT c.relname INTO made
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'outbox_published'::regclass
      AND c.relname ~ '^outbox_published_p0_[0-9]+$';
    IF made IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox_published) THEN
        EXECUTE format('DROP TABLE %I', made);
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF outbox_published FOR VALUES FROM (%L) TO (%L)',
            'outbox_published_p0_' || bound, to_timestamp(0), to_timestamp(bound));
    END IF;
END
$template$;

-- name: lock_waiters
-- Sessions of this database waiting for a lock another transaction holds.
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock';
