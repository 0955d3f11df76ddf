-- The consumer tests' business table and read-backs, MariaDB (PyMySQL's pyformat).
-- consumer_effects has no unique constraint on purpose: a handler that ran twice for one
-- event shows up as two rows instead of failing on a constraint.

-- name: effects_create
CREATE TABLE consumer_effects (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer_group varchar(255) NOT NULL,
    event_id varchar(64),
    event_key varchar(1024),
    event_type varchar(255),
    topic varchar(249) NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset bigint NOT NULL,
    n bigint,
    applied_by varchar(255) NOT NULL,
    applied_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- name: processed_event_ids
SELECT event_id FROM processed_events WHERE consumer_group = %(consumer_group)s;

-- name: processed_event_transactions
-- At most how many statements recorded the group's events: processed_at is the time of
-- the statement (UTC_TIMESTAMP(6) is fixed within one).
SELECT count(DISTINCT processed_at) FROM processed_events
WHERE consumer_group = %(consumer_group)s;

-- name: dead_letters_kept
SELECT consumer_group, topic, source_partition, source_offset, octet_length(record_value),
       error_type, error, dead_letter_error, headers
FROM consumer_dead_letters ORDER BY id;

-- name: processed_event_backdate
UPDATE processed_events SET processed_at = processed_at - INTERVAL %(seconds)s SECOND
WHERE consumer_group = %(consumer_group)s;
