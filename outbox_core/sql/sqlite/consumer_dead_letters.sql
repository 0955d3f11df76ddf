-- Queries on consumer_dead_letters (consumer_lib), SQLite dialect.

-- name: consumer_dead_letter_insert
INSERT INTO consumer_dead_letters (
    consumer_group, topic, source_partition, source_offset, record_key, record_value,
    headers, error_type, error, dead_letter_error
)
VALUES (
    :consumer_group, :topic, :source_partition, :source_offset, :record_key,
    :record_value, :headers, :error_type, :error, :dead_letter_error
)
ON CONFLICT (consumer_group, topic, source_partition, source_offset) DO NOTHING;
