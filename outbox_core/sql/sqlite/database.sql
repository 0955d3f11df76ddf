-- Database-wide statements, SQLite dialect: journal mode and transaction control.

-- name: database_wal_enable
-- WAL lets the relay read while producers write; the setting persists in the file.
PRAGMA journal_mode = WAL;

-- name: database_begin_immediate
-- Takes the write lock at once, so a state change never fails half-way on a lock
-- upgrade; a second writer waits here (busy timeout).
BEGIN IMMEDIATE;

-- name: database_commit
COMMIT;

-- name: database_rollback
ROLLBACK;
