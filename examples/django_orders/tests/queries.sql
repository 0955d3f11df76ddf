-- What the example's tests read back, Postgres.

-- name: outbox_events_of_key
-- Pending events and those the relay (retention=keep) moved into outbox_published.
SELECT event_id::text, event_type, payload FROM (
    SELECT id, event_id, topic, key, event_type, payload FROM outbox_events
    UNION ALL
    SELECT id, event_id, topic, key, event_type, payload FROM outbox_published
) AS e
WHERE topic = %(topic)s AND key = %(key)s ORDER BY id;

-- name: outbox_events_of_topic
SELECT count(*), count(*) FILTER (WHERE event_type = 'OrderPlaced')
FROM (
    SELECT topic, event_type FROM outbox_events
    UNION ALL
    SELECT topic, event_type FROM outbox_published
) AS e
WHERE topic = %(topic)s;

-- name: processed_events_of_group
SELECT event_id::text FROM processed_events WHERE consumer_group = %(consumer_group)s;

-- name: backend_terminate_self
-- The connection's own server process ends: what a database restart does to it.
SELECT pg_terminate_backend(pg_backend_pid());

-- name: outbox_delivery_of_key
SELECT tenant, available_at - created_at FROM outbox_events
WHERE topic = %(topic)s AND key = %(key)s ORDER BY id;
