-- The migrator's bookkeeping, SQLite dialect. Concurrency comes from
-- database_begin_immediate (database.sql).

-- name: migration_table_create
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- name: migration_list
SELECT version, name, checksum FROM outbox_schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO outbox_schema_migrations (version, name, checksum)
VALUES (:version, :name, :checksum);

