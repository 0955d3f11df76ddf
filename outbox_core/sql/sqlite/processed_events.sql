-- Queries on processed_events (consumer_lib's dedup table), SQLite dialect.

-- name: processed_event_insert
INSERT INTO processed_events (consumer_group, event_id)
VALUES (:consumer_group, :event_id)
ON CONFLICT (consumer_group, event_id) DO NOTHING
RETURNING 1;

-- name: processed_event_purge
-- One group's rows past that group's own retention (see the Postgres file).
DELETE FROM processed_events
WHERE rowid IN (
    SELECT rowid FROM processed_events
    WHERE consumer_group = :consumer_group
      AND processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || :retention_s || ' seconds')
    LIMIT :limit
)
RETURNING 1;

-- name: processed_event_insert_batch
-- event_ids: a JSON array. The event_ids back are recorded for the first time. The WHERE
-- is SQLite's way of telling an upsert's ON CONFLICT from a join after INSERT ... SELECT.
INSERT INTO processed_events (consumer_group, event_id)
SELECT DISTINCT :consumer_group, value FROM json_each(:event_ids) WHERE true
ON CONFLICT (consumer_group, event_id) DO NOTHING
RETURNING event_id;
