-- What the MariaDB tests read of a database's catalog (the current database's).

-- name: schema_tables
SELECT table_name, engine, table_collation FROM information_schema.tables
WHERE table_schema = DATABASE() ORDER BY table_name;

-- name: schema_columns
SELECT table_name, column_name, ordinal_position, column_type, is_nullable,
       column_default, collation_name, extra
FROM information_schema.columns
WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position;

-- name: schema_indexes
SELECT table_name, index_name, non_unique, seq_in_index, column_name, sub_part
FROM information_schema.statistics
WHERE table_schema = DATABASE() ORDER BY table_name, index_name, seq_in_index;

-- name: schema_constraints
SELECT table_name, constraint_name, check_clause FROM information_schema.check_constraints
WHERE constraint_schema = DATABASE() ORDER BY table_name, constraint_name;

-- name: schema_settings
SELECT name, value FROM outbox_settings ORDER BY name;

-- name: migrations_applied
SELECT version, name FROM outbox_schema_migrations ORDER BY version;

-- name: database_create
-- {database} is a name the test made itself ([a-z0-9_]).
CREATE DATABASE {database} CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;

-- name: database_drop
DROP DATABASE IF EXISTS {database};

-- name: rewind_processed_events
UPDATE processed_events SET processed_at = processed_at - INTERVAL %(s)s SECOND;

-- Read-back queries of the emit tests: inspect.sql's, with `key` quoted (a reserved word
-- here) and times in UTC.

-- name: test_order_insert
INSERT INTO test_orders (id, customer) VALUES (%(id)s, %(customer)s);

-- name: outbox_rows
SELECT id, event_id, topic, `key`, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events ORDER BY id;

-- name: outbox_row_tenants
SELECT id, `key`, tenant FROM outbox_events ORDER BY id;

-- name: outbox_delays
SELECT `key`, TIMESTAMPDIFF(MICROSECOND, created_at, available_at) / 1e6, available_at
FROM outbox_events ORDER BY id;

-- name: outbox_created_lag
-- Seconds between each row's created_at and the server's UTC clock now.
SELECT TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) / 1e6 FROM outbox_events
ORDER BY id;

-- name: key_locks_count
SELECT count(*), min(slot), max(slot) FROM outbox_key_locks;

-- name: key_locks_clear
-- As a schema made by hand without the slot rows.
DELETE FROM outbox_key_locks;

-- name: key_lock_take
-- A writer of another key holding its slot; NOWAIT: error 1205/3572-like at once if taken.
SELECT slot FROM outbox_key_locks WHERE slot = %(slot)s FOR UPDATE NOWAIT;

-- name: session_time_zone_set
SET SESSION time_zone = '+05:00';

-- name: session_repeatable_read
SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ;

-- name: snapshot_open
-- Takes the REPEATABLE READ snapshot (the first consistent read of a transaction).
SELECT count(*) FROM outbox_settings;
