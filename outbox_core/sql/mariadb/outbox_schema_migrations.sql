-- The migrator's bookkeeping, MariaDB dialect.

-- name: migration_table_create
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version integer NOT NULL PRIMARY KEY,
    name varchar(255) NOT NULL,
    checksum char(64) NOT NULL,
    applied_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- name: migration_lock
-- GET_LOCK is the session's (MariaDB has no transaction-scoped advisory lock), which the
-- migrator wants: DDL commits implicitly, so the lock must span all of the run. Its name
-- is server-wide: the database's hash keeps migrators of other databases apart (names are
-- at most 64 characters). 1: taken; 0: timed out; NULL: an error.
SELECT GET_LOCK(CONCAT('outbox_', %(lock_ns)s, '_', MD5(DATABASE())), %(timeout_s)s);

-- name: migration_unlock
SELECT RELEASE_LOCK(CONCAT('outbox_', %(lock_ns)s, '_', MD5(DATABASE())));

-- name: migration_list
SELECT version, name, checksum FROM outbox_schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO outbox_schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s);
