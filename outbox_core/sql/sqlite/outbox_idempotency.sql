-- Queries on outbox_idempotency, SQLite dialect.

-- name: idempotency_insert
INSERT INTO outbox_idempotency (scope, idempotency_key, body_hash, event_id)
VALUES (:scope, :idempotency_key, :body_hash, :event_id)
ON CONFLICT (scope, idempotency_key) DO NOTHING
RETURNING event_id;

-- name: idempotency_get
SELECT body_hash, event_id
FROM outbox_idempotency
WHERE scope = :scope AND idempotency_key = :idempotency_key;

-- name: idempotency_purge
DELETE FROM outbox_idempotency
WHERE rowid IN (
    SELECT rowid FROM outbox_idempotency
    WHERE created_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || :retention_s || ' seconds')
    LIMIT :limit
)
RETURNING 1;
