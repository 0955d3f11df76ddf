-- Queries on outbox_idempotency, MariaDB dialect.

-- name: idempotency_insert
-- Waits for a concurrent transaction holding the same key (its uncommitted row), then
-- inserts, or returns no row when the key is held. IGNORE would also turn a value too long
-- or a NULL into a warning, but producer_lib checks every value first (scope and key at
-- most 255 characters, a 32-byte hash, a 36-character id): only the duplicate is left.
INSERT IGNORE INTO outbox_idempotency (scope, idempotency_key, body_hash, event_id)
VALUES (%(scope)s, %(idempotency_key)s, %(body_hash)s, %(event_id)s)
RETURNING event_id;

-- name: idempotency_get
-- A locking read: at REPEATABLE READ a plain SELECT reads the caller's snapshot, which
-- may predate the commit of the row idempotency_insert found.
SELECT body_hash, event_id
FROM outbox_idempotency
WHERE scope = %(scope)s AND idempotency_key = %(idempotency_key)s
LOCK IN SHARE MODE;

-- name: idempotency_purge
DELETE FROM outbox_idempotency
WHERE created_at < TIMESTAMPADD(MICROSECOND, -ROUND(%(retention_s)s * 1000000), NOW(6))
ORDER BY created_at
LIMIT %(limit)s
RETURNING 1;
