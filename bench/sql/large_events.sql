-- Statements of bench/large_events.py.

-- name: large_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- name: large_read
-- --postgres-alone: the backlog's next rows in id order with their payloads, as many as
-- the relay's byte budget claims at once.
SELECT id, payload FROM outbox_events WHERE id > %(after)s ORDER BY id LIMIT %(rows)s;

-- name: large_delete
-- --postgres-alone: the rows just read go, as the relay's settle deletes them with
-- retention=delete.
DELETE FROM outbox_events WHERE id = ANY(%(ids)s);
