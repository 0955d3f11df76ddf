-- Queries on outbox_events, SQLite dialect (named parameters). SQLite has one writer at
-- a time, so ids already follow commit order: no per-key lock is needed.

-- name: outbox_insert
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at)
VALUES (:event_id, :topic, :key, :shard, :event_type, :payload, :headers,
        COALESCE(:available_at,
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || :delay_s || ' seconds')));

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
