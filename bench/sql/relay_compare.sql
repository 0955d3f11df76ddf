-- Statements of bench/relay_compare.py: the backlog, database copies, replication slots.
-- {dbname}, {template} and {publication} are filled in with psycopg.sql.Identifier.

-- name: bench_database_from_template
CREATE DATABASE {dbname} TEMPLATE {template};

-- name: backlog_create
-- The events producer_lib wrote, kept in write order; every contender's outbox is
-- filled from this table, so all of them drain the same rows.
CREATE TABLE bench_backlog AS
SELECT row_number() OVER (ORDER BY id) AS ord, event_id, topic, key, shard, event_type,
       payload, headers
FROM outbox_events;

-- name: backlog_index
CREATE UNIQUE INDEX bench_backlog_ord_idx ON bench_backlog (ord);

-- name: outbox_truncate
TRUNCATE outbox_events;

-- name: backlog_count
SELECT count(*) FROM bench_backlog;

-- name: backlog_load_chunk
-- One transaction of the backlog load: rows (after, upto] in write order.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
SELECT event_id, topic, key, shard, event_type, payload, headers
FROM bench_backlog
WHERE ord > %(after)s AND ord <= %(upto)s
ORDER BY ord;

-- name: backlog_rows
-- Rows (after, upto] of the backlog in write order, as another database's outbox takes
-- them (relay_compare_mariadb.sql's backlog_insert): the id as text, the headers as JSON text.
SELECT event_id::text AS event_id, topic, key, shard, event_type, payload,
       headers::text AS headers
FROM bench_backlog
WHERE ord > %(after)s AND ord <= %(upto)s
ORDER BY ord;

-- name: payload_size_avg
SELECT avg(length(payload))::float8, count(DISTINCT key) FROM bench_backlog;

-- name: outbox_vacuum_analyze
VACUUM ANALYZE outbox_events;

-- name: server_checkpoint
CHECKPOINT;

-- name: outbox_any_left
-- The outbox is drained once every row is settled by the relay: deleted, or marked
-- published (retention=keep).
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL);

-- name: outbox_unpublished_seqs
-- The backlog's sequence numbers still unpublished after a drain: not on the topic, yet
-- not lost (a drain stopped early). Payloads are producer_lib's JSON with "seq".
SELECT (convert_from(payload, 'UTF8')::jsonb ->> 'seq')::bigint
FROM outbox_events
WHERE published_at IS NULL;

-- name: outbox_count_all
SELECT count(*) FROM outbox_events;

-- name: server_settings
SELECT version(), current_setting('wal_level'), current_setting('shared_buffers'),
       current_setting('synchronous_commit'), current_setting('fsync'),
       current_setting('max_replication_slots'), current_setting('max_wal_senders');

-- name: slot_state
SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %(slot)s;

-- name: slot_drop
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = %(slot)s AND NOT active;

-- name: publication_drop
DROP PUBLICATION IF EXISTS {publication};
