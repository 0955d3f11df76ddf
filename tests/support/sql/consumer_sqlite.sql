-- The consumer tests' business table and read-backs, SQLite (named paramstyle).
-- consumer_effects has no unique constraint on purpose: a handler that ran twice for one
-- event shows up as two rows instead of failing on a constraint.

-- name: effects_create
CREATE TABLE consumer_effects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer_group TEXT NOT NULL,
    event_id TEXT,
    event_key TEXT,
    event_type TEXT,
    topic TEXT NOT NULL,
    kafka_partition INTEGER NOT NULL,
    kafka_offset INTEGER NOT NULL,
    n INTEGER,
    applied_by TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- name: processed_event_ids
SELECT event_id FROM processed_events WHERE consumer_group = :consumer_group;

-- name: processed_event_transactions
-- At most how many statements recorded the group's events: processed_at defaults to the
-- time of the statement ('now' is fixed within one).
SELECT count(DISTINCT processed_at) FROM processed_events
WHERE consumer_group = :consumer_group;

-- name: dead_letters_kept
SELECT consumer_group, topic, source_partition, source_offset, length(record_value),
       error_type, error, dead_letter_error, headers
FROM consumer_dead_letters ORDER BY id;

-- name: processed_event_backdate
UPDATE processed_events
SET processed_at = strftime('%Y-%m-%dT%H:%M:%fZ', processed_at, '-' || :seconds || ' seconds')
WHERE consumer_group = :consumer_group;
