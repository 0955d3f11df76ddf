-- consumer_lib: each consumer group purges its own processed_events rows, and records a
-- dead-letter topic can never take (migrations/postgres/0003_consumer_dead_letters.sql).
CREATE INDEX IF NOT EXISTS processed_events_group_age_idx
    ON processed_events (consumer_group, processed_at);
DROP INDEX IF EXISTS processed_events_processed_at_idx ON processed_events;

-- source_offset: a Kafka offset or a Redis stream entry id (source_partition -1).
CREATE TABLE IF NOT EXISTS consumer_dead_letters (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer_group varchar(255) NOT NULL,
    topic varchar(249) NOT NULL,
    source_partition integer NOT NULL,
    source_offset varchar(64) NOT NULL,
    record_key longblob,
    record_value longblob,
    headers json NOT NULL DEFAULT '[]',
    error_type text NOT NULL,
    error text NOT NULL,
    dead_letter_error text NOT NULL,
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT consumer_dead_letters_record_key
        UNIQUE (consumer_group, topic, source_partition, source_offset)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
