-- The benchmark's business table: what a service writes in the same transaction as emit.

-- name: orders_create_table
CREATE TABLE orders (
    id bigserial PRIMARY KEY,
    customer text NOT NULL,
    amount_cents int NOT NULL,
    created_at timestamptz DEFAULT now()
);

-- name: order_insert
-- One order; the id goes into the event payload.
INSERT INTO orders (customer, amount_cents)
VALUES (%(customer)s, %(amount_cents)s)
RETURNING id;
