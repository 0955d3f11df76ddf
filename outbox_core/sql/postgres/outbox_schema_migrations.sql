-- The migrator's bookkeeping, Postgres dialect.

-- name: migration_table_create
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migration_lock
-- Session-level, so it spans the one transaction per migration; two migrators queue here.
SELECT pg_advisory_lock(%(lock_ns)s::int, 0);

-- name: migration_unlock
SELECT pg_advisory_unlock(%(lock_ns)s::int, 0);

-- name: migration_list
SELECT version, name, checksum FROM outbox_schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO outbox_schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s);

