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
