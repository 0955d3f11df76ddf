-- Statements of bench/large_events.py.

-- name: large_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- name: large_clear
-- bench/emit_large.py: the rows of the last round go before the next one.
TRUNCATE outbox_events;
