-- Queries on outbox_idempotency, Postgres dialect.

-- name: idempotency_insert
-- Waits for a concurrent transaction holding the same key, then inserts or does nothing.
INSERT INTO outbox_idempotency (scope, idempotency_key, body_hash, event_id)
VALUES (%(scope)s, %(idempotency_key)s, %(body_hash)s, %(event_id)s)
ON CONFLICT (scope, idempotency_key) DO NOTHING
RETURNING event_id;

-- name: idempotency_get
SELECT body_hash, event_id
FROM outbox_idempotency
WHERE scope = %(scope)s AND idempotency_key = %(idempotency_key)s;

-- name: idempotency_purge
DELETE FROM outbox_idempotency
WHERE (scope, idempotency_key) IN (
    SELECT scope, idempotency_key FROM outbox_idempotency
    WHERE created_at < now() - %(retention_s)s * interval '1 second'
    LIMIT %(limit)s
)
RETURNING 1;
