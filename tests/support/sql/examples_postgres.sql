-- Queries the example services' tests read their tables with (examples/), Postgres.

-- name: example_shipments_per_order
SELECT order_id::text, count(*) FROM shipments GROUP BY order_id ORDER BY order_id;

-- name: example_order_ids
SELECT id::text FROM orders ORDER BY id;

-- name: example_outbox_event_ids
-- Pending rows and those retention=keep moved into the history once published.
SELECT event_id::text FROM (
    SELECT id, event_id FROM outbox_events
    UNION ALL
    SELECT id, event_id FROM outbox_published
) AS e ORDER BY id;
