-- Database-wide statements, MariaDB dialect.

-- name: session_init
-- Run by every connection outbox_core opens (PyMySQL's init_command, one statement). The
-- schema's DATETIME(6) columns hold UTC without a zone, and CURRENT_TIMESTAMP(6) defaults
-- are in the session's zone, so every session runs in UTC. READ COMMITTED: the server's
-- default, REPEATABLE READ, takes gap locks on locking reads, which would make the relay's
-- claims block producers' inserts into the gaps they read. (MariaDB names the variable
-- tx_isolation; MySQL 8, transaction_isolation.)
SET SESSION time_zone = '+00:00', SESSION tx_isolation = 'READ-COMMITTED';
