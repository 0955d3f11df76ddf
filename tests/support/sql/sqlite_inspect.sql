-- SQLite-only read-back queries for tests.

-- name: test_order_insert
INSERT INTO test_orders (id, customer) VALUES (:id, :customer);

-- name: schema_tables
SELECT name FROM sqlite_master
WHERE type = 'table' AND name NOT IN ('sqlite_sequence', 'outbox_schema_migrations')
ORDER BY name;

-- name: schema_table_columns
SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(:table)
ORDER BY cid;

-- name: schema_indexes
SELECT tbl_name, name, coalesce(sql, '') FROM sqlite_master
WHERE type = 'index' AND tbl_name <> 'outbox_schema_migrations'
ORDER BY tbl_name, name;

-- name: schema_settings
SELECT name, value FROM outbox_settings ORDER BY name;

-- name: migration_forge
INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x');

-- name: migration_tamper
UPDATE outbox_schema_migrations SET checksum = 'tampered' WHERE version = 1;

-- name: outbox_delays
SELECT key, (julianday(available_at) - julianday(created_at)) * 86400.0, available_at
FROM outbox_events ORDER BY id;
