-- outbox_published, MariaDB dialect: a plain table (migrations/mariadb/0005), so there are
-- no partitions to rotate; the purge deletes old rows in bounded batches through
-- outbox_published_published_idx.

-- name: outbox_published_rotate
SELECT 0 AS created, 0 AS dropped, 0 AS skipped;

-- name: outbox_published_purge
DELETE FROM outbox_published
WHERE published_at < TIMESTAMPADD(MICROSECOND, -ROUND(%(retention_s)s * 1000000), NOW(6))
ORDER BY published_at
LIMIT %(limit)s
RETURNING 1;
