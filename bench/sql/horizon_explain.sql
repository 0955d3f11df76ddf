-- Statements of bench/horizon_explain.py: rows published under a held snapshot, and the
-- claim and the settle explained on top of them.

-- name: horizon_holder_create
-- A small table of the snapshot holder's own: it never reads outbox_events.
CREATE TABLE bench_horizon_holder AS SELECT g AS n FROM generate_series(1, 10) AS g;

-- name: horizon_holder_read
SELECT count(*) FROM bench_horizon_holder;

-- name: horizon_leases
INSERT INTO outbox_relay_leases (shard, owner, token, lease_until)
SELECT s, 'bench', 1, 'infinity' FROM generate_series(0, %(shard_count)s - 1) AS s;

-- name: horizon_load
-- n pending rows spread over the shards and 1000 keys, in id order.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload)
SELECT gen_random_uuid(), 'orders', 'k' || (g %% 1000), (g %% 1000) %% %(shard_count)s,
       'created', convert_to(repeat('x', 200), 'UTF8')
FROM generate_series(1, %(n)s) AS g
ORDER BY g;

-- name: horizon_publish_all
-- What the settles of retention=keep do to every pending row, in one statement.
UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL;

-- name: horizon_pending_of_shard
SELECT id FROM outbox_events WHERE shard = %(shard)s AND published_at IS NULL
ORDER BY id LIMIT %(limit)s;

-- name: horizon_dead_tuples
SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events';
