-- Queries on consumer_dead_letters (consumer_lib), Postgres dialect.

-- name: consumer_dead_letter_insert
-- A record its dead-letter topic can never take; a second copy of it (the record seen
-- again after a crash before its offset was committed) is not kept twice.
INSERT INTO consumer_dead_letters (
    consumer_group, topic, source_partition, source_offset, record_key, record_value,
    headers, error_type, error, dead_letter_error
)
VALUES (
    %(consumer_group)s, %(topic)s, %(source_partition)s, %(source_offset)s, %(record_key)s,
    %(record_value)s, %(headers)s::jsonb, %(error_type)s, %(error)s, %(dead_letter_error)s
)
ON CONFLICT (consumer_group, topic, source_partition, source_offset) DO NOTHING;
