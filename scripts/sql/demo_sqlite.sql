-- name: demo_order_insert
INSERT INTO demo_orders (id, customer, amount_cents) VALUES (:id, :customer, :amount_cents);
