-- The latency benchmark's own statements (bench/relay_latency.py).

-- name: database_transactions
-- Every statement the relay runs is its own transaction (autocommit): their count.
SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %(dbname)s;

-- name: bench_events_create
-- The pgbench writer's rows, built by producer_lib before the clock starts (seq -> the
-- values Outbox.emit would insert, with its per-key lock key).
CREATE UNLOGGED TABLE IF NOT EXISTS bench_events (
    seq bigint PRIMARY KEY,
    event_id uuid NOT NULL,
    topic text NOT NULL,
    key text NOT NULL,
    shard smallint NOT NULL,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL,
    lock_ns int NOT NULL,
    lock_key int NOT NULL
);

-- name: bench_events_insert
INSERT INTO bench_events (seq, event_id, topic, key, shard, event_type, payload, headers,
                          lock_ns, lock_key)
VALUES (%(seq)s, %(event_id)s, %(topic)s, %(key)s, %(shard)s, %(event_type)s, %(payload)s,
        %(headers)s::jsonb, %(lock_ns)s, %(lock_key)s);

-- name: bench_commits_create
-- One row per event the pgbench writer committed, written in the event's transaction:
-- its xmin is that transaction, whose commit time Postgres keeps (track_commit_timestamp).
CREATE UNLOGGED TABLE IF NOT EXISTS bench_commits (seq bigint PRIMARY KEY);

-- name: bench_commits_times
SELECT seq, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8
FROM bench_commits WHERE seq >= %(first)s AND seq < %(last)s;

-- name: latency_holder_create
-- A small table of the snapshot holder's own: it never reads outbox_events.
CREATE TABLE IF NOT EXISTS bench_latency_holder AS SELECT g AS n FROM generate_series(1, 10) AS g;

-- name: latency_holder_read
SELECT count(*) FROM bench_latency_holder;

-- name: latency_bulk_load
-- n events in one transaction, on the measured topic, with a seq no load uses.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload)
SELECT gen_random_uuid(), %(topic)s, 'bulk-' || (g %% 1000), (g %% 1000) %% 16, 'Bulk',
       convert_to('{"seq": -1}', 'UTF8')
FROM generate_series(1, %(n)s) AS g
ORDER BY g;

-- name: latency_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
