-- consumer_lib: each consumer group purges only its own processed_events rows, by its own
-- retention; this index finds one group's old rows without reading the other groups'.
-- Building it reads the table once while the consumers' inserts wait: on a large table,
-- migrate at a quiet moment.
CREATE INDEX processed_events_group_age_idx ON processed_events (consumer_group, processed_at);
DROP INDEX processed_events_processed_at_idx;

-- Records a consumer could neither apply nor put on its dead-letter topic, because the
-- topic can never take them (too large, an invalid topic name, not authorized). The
-- consumer keeps them here, in its own database, and moves on. One row per record and
-- group: a record seen again after a crash is not kept twice. source_offset is the Kafka
-- offset, or the Redis stream entry id (source_partition -1).
CREATE TABLE consumer_dead_letters (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group text NOT NULL,
    topic text NOT NULL,
    source_partition integer NOT NULL,
    source_offset text NOT NULL,
    record_key bytea,
    record_value bytea,
    headers jsonb NOT NULL DEFAULT '[]'::jsonb,
    error_type text NOT NULL,
    error text NOT NULL,
    dead_letter_error text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumer_dead_letters_record_key
        UNIQUE (consumer_group, topic, source_partition, source_offset)
);
