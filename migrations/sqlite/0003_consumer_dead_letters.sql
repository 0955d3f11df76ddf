-- consumer_lib: per-group purge and the dead-letter table; see the Postgres twin.
CREATE INDEX processed_events_group_age_idx ON processed_events (consumer_group, processed_at);
DROP INDEX processed_events_processed_at_idx;

CREATE TABLE consumer_dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer_group TEXT NOT NULL,
    topic TEXT NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset TEXT NOT NULL,
    record_key BLOB,
    record_value BLOB,
    headers TEXT NOT NULL DEFAULT '[]',
    error_type TEXT NOT NULL,
    error TEXT NOT NULL,
    dead_letter_error TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (consumer_group, topic, source_partition, source_offset)
);
