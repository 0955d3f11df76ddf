-- Queries on outbox_idempotency, MariaDB dialect.

-- name: idempotency_purge
DELETE FROM outbox_idempotency
WHERE created_at < TIMESTAMPADD(MICROSECOND, -ROUND(%(retention_s)s * 1000000), NOW(6))
ORDER BY created_at
LIMIT %(limit)s
RETURNING 1;
