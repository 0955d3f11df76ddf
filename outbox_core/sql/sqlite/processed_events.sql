-- Queries on processed_events (consumer_lib's dedup table), SQLite dialect.

-- name: processed_event_insert
INSERT INTO processed_events (consumer_group, event_id)
VALUES (:consumer_group, :event_id)
ON CONFLICT (consumer_group, event_id) DO NOTHING
RETURNING 1;

-- name: processed_event_purge
DELETE FROM processed_events
WHERE rowid IN (
    SELECT rowid FROM processed_events
    WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || :retention_s || ' seconds')
    LIMIT :limit
)
RETURNING 1;
