-- Database-wide statements, MariaDB dialect.

-- fragment: utc_read_committed
-- The schema's DATETIME(6) columns hold UTC without a zone, and CURRENT_TIMESTAMP(6)
-- defaults are in the session's zone, so every session runs in UTC. READ COMMITTED: the
-- server's default, REPEATABLE READ, takes gap locks on locking reads, which would make
-- the relay's claims block producers' inserts into the gaps they read; and at READ
-- COMMITTED every statement reads a fresh snapshot (the claim's clock relies on it).
-- (MariaDB names the variable tx_isolation; MySQL 8, transaction_isolation.)
SET SESSION time_zone = '+00:00', SESSION tx_isolation = 'READ-COMMITTED'

-- name: session_init
-- Run by every connection outbox_core opens (PyMySQL's init_command, one statement).
{{utc_read_committed}};

-- name: session_init_relay
-- The relay's connections (outbox_core/mariadb_pool.py), with its timeouts: a lock wait
-- (whole seconds, at least 1) and a statement's run time (max_statement_time, seconds)
-- end with a retriable error instead of holding a cycle or a lease round. A transaction
-- left idle as long as a lock wait may last ends the session (idle_transaction_timeout):
-- a settle or a lease write is several statements the relay sends one by one, and a
-- relay stopped between two of them (SIGSTOP, a frozen VM) would otherwise keep its lease
-- rows locked, and the takeover of its shards waiting, for as long as it stays stopped.
-- The session carries the relay's replica id in @outbox_replica_id, where a trigger can
-- read which replica changed a row (what application_name tells on Postgres).
{{utc_read_committed}},
    SESSION innodb_lock_wait_timeout = %(lock_wait_s)s,
    SESSION idle_transaction_timeout = %(lock_wait_s)s,
    SESSION max_statement_time = %(statement_s)s,
    @outbox_replica_id = %(replica)s;

-- name: database_in_transaction
-- Whether the session has a transaction open (1) or runs each statement by itself (0).
SELECT @@in_transaction;

-- name: transaction_begin
-- A plan that writes opens its transaction with its first statement, in the same round
-- trip (outbox_core/executors.py, AiomysqlExecutor).
START TRANSACTION;

-- name: transaction_commit
-- Sent with the last statement of a plan that writes (Statement(commit=True)).
COMMIT;
