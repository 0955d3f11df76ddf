-- The consumer tests' business table and read-backs, Postgres (psycopg paramstyle).
-- consumer_effects has no unique constraint on purpose: a handler that ran twice for one
-- event shows up as two rows instead of failing on a constraint.

-- name: effects_create
CREATE TABLE consumer_effects (
    id bigserial PRIMARY KEY,
    consumer_group text NOT NULL,
    event_id text,
    event_key text,
    event_type text,
    topic text NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset bigint NOT NULL,
    n bigint,
    applied_by text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: effects_applied_before
-- Effects whose row was written before a moment (the database clock is this machine's).
SELECT consumer_group, event_id, event_key, event_type, topic, kafka_partition, kafka_offset,
       n, applied_by, id
FROM consumer_effects WHERE applied_at < %(before)s ORDER BY id;

-- name: processed_event_ids
SELECT event_id::text FROM processed_events WHERE consumer_group = %(consumer_group)s;

-- name: backends_terminate
-- A database blip: ends every other client connection to this database (the consumer's,
-- mid-transaction included); they see an OperationalError on their next statement.
SELECT count(pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend';

-- name: processed_event_transactions
-- How many transactions recorded the group's events: processed_at defaults to now(), the
-- time its transaction started.
SELECT count(DISTINCT processed_at) FROM processed_events
WHERE consumer_group = %(consumer_group)s;

-- name: dead_letters_kept
-- What the consumer kept in its database because the dead-letter topic refused it.
SELECT consumer_group, topic, source_partition, source_offset, octet_length(record_value),
       error_type, error, dead_letter_error, headers::text
FROM consumer_dead_letters ORDER BY id;

-- name: processed_event_backdate
-- Ages a group's dedup rows, as if they had been recorded `seconds` ago.
UPDATE processed_events SET processed_at = processed_at - %(seconds)s * interval '1 second'
WHERE consumer_group = %(consumer_group)s;
