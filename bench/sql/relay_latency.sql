-- The latency benchmark's own statements (bench/relay_latency.py).

-- name: database_transactions
-- Every statement the relay runs is its own transaction (autocommit): their count.
SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %(dbname)s;
