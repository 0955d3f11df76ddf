-- Statements of bench/outbox_bloat.py: the template of one backlog, its loads, the held
-- snapshot and what each drain measured.

-- name: bloat_template_create
-- The events producer_lib wrote once, in write order; every round loads a copy of them
-- with fresh event ids.
CREATE TABLE bench_bloat_backlog AS
SELECT row_number() OVER (ORDER BY id) AS ord, topic, key, shard, event_type, payload, headers
FROM outbox_events;

-- name: bloat_outbox_truncate
TRUNCATE outbox_events;

-- name: bloat_load
-- One backlog in one transaction: the relay sees all of it at once, so its rate is a drain.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
SELECT gen_random_uuid(), topic, key, shard, event_type, payload, headers
FROM bench_bloat_backlog
ORDER BY ord
RETURNING id, shard;

-- name: bloat_holder_create
-- A small table of the snapshot holder's own: it never reads outbox_events.
CREATE TABLE bench_bloat_holder AS SELECT g AS n FROM generate_series(1, 10) AS g;

-- name: bloat_holder_read
SELECT count(*) FROM bench_bloat_holder;

-- name: bloat_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- name: bloat_last_published
-- Whether each shard's last row of the backlog is published: a shard's rows go out in id
-- order, so this says the backlog is drained, by primary key. The drain is polled with
-- this; a count of the unpublished rows walks every dead entry of the partial index (the
-- cost under study), and polling it took a core of its own under a held snapshot.
-- retention=keep moves a published row into outbox_published: a row still in
-- outbox_events unpublished is what is left.
SELECT NOT EXISTS (SELECT 1 FROM outbox_events
                   WHERE id = ANY(%(ids)s) AND published_at IS NULL);

-- name: bloat_round_rate
-- Events of one round per second, from its first settle to its last.
SELECT count(*), extract(epoch FROM max(published_at) - min(published_at))::float8
FROM outbox_published
WHERE id >= %(first_id)s;
