-- The demo's business table: an order row written in the same transaction as its event.

-- name: demo_orders_create
CREATE TABLE IF NOT EXISTS demo_orders (
    id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    amount_cents INTEGER NOT NULL
);
