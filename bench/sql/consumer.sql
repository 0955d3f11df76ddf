-- The consumer benchmark's business table: what each handler writes for one event.

-- name: applied_orders_create_table
CREATE TABLE applied_orders (
    id bigserial PRIMARY KEY,
    order_id bigint NOT NULL,
    customer text NOT NULL,
    amount_cents int NOT NULL,
    created_at timestamptz DEFAULT now()
);

-- name: applied_order_insert
-- One row per event, from its payload.
INSERT INTO applied_orders (order_id, customer, amount_cents)
VALUES (%(order_id)s, %(customer)s, %(amount_cents)s);

-- name: applied_orders_reset
-- Between timed runs (not timed): every run starts from empty tables.
TRUNCATE applied_orders, processed_events;

-- name: applied_orders_count
SELECT count(*) FROM applied_orders;
