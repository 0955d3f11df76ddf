-- SQLite keeps published rows in outbox_events (migrations/sqlite/0005_published_history.sql):
-- a delete leaves no dead row versions there. The purge round runs the same statements on
-- every dialect; here they have nothing to do.

-- name: outbox_published_rotate
SELECT 0 AS created, 0 AS dropped, 0 AS skipped
WHERE :retention_s IS NOT NULL OR :width_s IS NOT NULL OR :ahead_s IS NOT NULL
   OR :lock_timeout_ms IS NOT NULL OR 1;

-- name: outbox_published_purge
SELECT 1 WHERE :retention_s IS NULL AND :limit IS NULL AND 0;
