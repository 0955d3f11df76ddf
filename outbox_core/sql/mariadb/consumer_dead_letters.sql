-- Queries on consumer_dead_letters (consumer_lib), MariaDB dialect.

-- name: consumer_dead_letter_insert
-- A record its dead-letter topic can never take; a second copy of it (the record seen
-- again after a crash before its offset was committed) is not kept twice. ON DUPLICATE
-- KEY UPDATE (a no-op) answers only a duplicate key, the record's (the id is generated);
-- INSERT IGNORE would also keep a value cut short or a NULL instead of failing.
-- created_at in UTC whatever the session's time zone (the column holds UTC).
INSERT INTO consumer_dead_letters (
    consumer_group, topic, source_partition, source_offset, record_key, record_value,
    headers, error_type, error, dead_letter_error, created_at
)
VALUES (
    %(consumer_group)s, %(topic)s, %(source_partition)s, %(source_offset)s, %(record_key)s,
    %(record_value)s, %(headers)s, %(error_type)s, %(error)s, %(dead_letter_error)s,
    UTC_TIMESTAMP(6)
)
ON DUPLICATE KEY UPDATE id = id;
