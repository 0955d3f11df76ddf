-- Statements of bench/large_events.py.

-- name: large_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
