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
ORDER BY table_name, column_name;

-- name: schema_indexes
SELECT tablename, indexname, indexdef FROM pg_indexes
WHERE schemaname = 'public' AND tablename <> 'outbox_schema_migrations'
ORDER BY tablename, indexname;

-- name: schema_constraints
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace
  AND conrelid::regclass::text <> 'outbox_schema_migrations'
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
