-- Queries the example services' tests read their tables with (examples/), Postgres.

-- name: example_shipments_per_order
SELECT order_id::text, count(*) FROM shipments GROUP BY order_id ORDER BY order_id;

-- name: example_order_ids
SELECT id::text FROM orders ORDER BY id;

-- name: example_outbox_event_ids
SELECT event_id::text FROM outbox_events ORDER BY id;
