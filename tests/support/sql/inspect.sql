-- Read-back queries the tests use to check what was written. Valid in both dialects.

-- name: outbox_rows
SELECT id, event_id, topic, key, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events ORDER BY id;

-- name: outbox_count
SELECT count(*) FROM outbox_events;

-- name: idempotency_count
SELECT count(*) FROM outbox_idempotency;

-- name: migrations_applied
SELECT version, name FROM outbox_schema_migrations ORDER BY version;

-- name: test_orders_create
CREATE TABLE test_orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL);

-- name: test_order_count
SELECT count(*) FROM test_orders;


-- name: outbox_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- name: outbox_unpublished_by_tenant
SELECT coalesce(tenant, ''), count(*) FROM outbox_events
WHERE published_at IS NULL GROUP BY 1 ORDER BY 1;

-- name: outbox_unpublished_by_shard
SELECT shard, status, count(*), min(id), max(attempts) FROM outbox_events
WHERE published_at IS NULL GROUP BY shard, status ORDER BY shard, status;

-- name: outbox_unpublished_pending
SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND status = 'pending';

-- name: outbox_parked
SELECT id, key, attempts, last_error FROM outbox_events WHERE status = 'parked' ORDER BY id;

-- name: lease_rows
SELECT shard, owner, token FROM outbox_relay_leases ORDER BY shard;

-- name: idempotency_keys
SELECT idempotency_key FROM outbox_idempotency ORDER BY idempotency_key;

-- name: outbox_snapshot
-- Everything a relay may change on a row, for "nothing was written" checks.
SELECT id, event_id, key, shard, payload, headers, attempts, status, last_error,
       available_at, published_at
FROM outbox_events ORDER BY id;

-- name: outbox_row_tenants
SELECT id, key, tenant FROM outbox_events ORDER BY id;

-- name: outbox_events_clear
DELETE FROM outbox_events;

-- name: leases_clear
DELETE FROM outbox_relay_leases;

-- name: replicas_clear
DELETE FROM outbox_relay_replicas;

-- name: idempotency_rows_lock
-- Holds every idempotency key until the transaction ends: a purge of them waits.
SELECT scope FROM outbox_idempotency FOR UPDATE;
