-- The migrator's bookkeeping, SQLite dialect. Concurrency comes from BEGIN IMMEDIATE.

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

-- name: migration_begin
-- Takes the write lock at once: a second migrator waits here (busy timeout), then sees
-- the first one's work.
BEGIN IMMEDIATE;

-- name: migration_commit
COMMIT;

-- name: migration_rollback
ROLLBACK;

-- name: database_wal_enable
-- WAL lets the relay read while producers write; the setting persists in the file.
PRAGMA journal_mode = WAL;
