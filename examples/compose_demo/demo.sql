-- The compose demo's own statements (its producer, consumer and check), Postgres.

-- name: schema_probe
-- The outbox schema exists once `outbox-relay migrate` has run.
SELECT 1 FROM outbox_schema_migrations LIMIT 1;

-- name: processed_events_probe
SELECT 1 FROM processed_events LIMIT 1;

-- name: demo_orders_create
CREATE TABLE IF NOT EXISTS demo_orders (
    order_id uuid PRIMARY KEY, customer text NOT NULL, amount_cents integer NOT NULL
);

-- name: demo_order_insert
INSERT INTO demo_orders (order_id, customer, amount_cents)
VALUES (%(order_id)s, %(customer)s, %(amount_cents)s)
ON CONFLICT (order_id) DO NOTHING;

-- name: demo_invoices_create
CREATE TABLE IF NOT EXISTS demo_invoices (
    order_id uuid PRIMARY KEY, customer text NOT NULL, amount_cents integer NOT NULL,
    event_id uuid NOT NULL, invoiced_at timestamptz NOT NULL DEFAULT now()
);

-- name: demo_invoice_insert
INSERT INTO demo_invoices (order_id, customer, amount_cents, event_id)
VALUES (%(order_id)s, %(customer)s, %(amount_cents)s, %(event_id)s);

-- name: demo_round_trip_counts
SELECT
  (SELECT count(*) FROM demo_orders),
  (SELECT count(*) FROM outbox_events WHERE published_at IS NULL),
  (SELECT count(*) FROM demo_invoices),
  (SELECT count(*) FROM processed_events WHERE consumer_group = %(group)s),
  (SELECT count(*) FROM demo_orders o
     WHERE NOT EXISTS (SELECT 1 FROM demo_invoices i WHERE i.order_id = o.order_id)),
  (SELECT coalesce(max(n), 0) FROM
     (SELECT count(*) AS n FROM demo_invoices GROUP BY order_id) AS per_order);
