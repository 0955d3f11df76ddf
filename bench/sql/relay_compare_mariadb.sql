-- Statements of bench/relay_compare.py on a MariaDB outbox (contender ours-mariadb), the
-- twins of relay_compare.sql's. PyMySQL's parameter style; {dbname} is a name the bench
-- made itself (letters, digits and _), quoted here.
--
-- backlog_insert takes one row of the Postgres template's backlog (relay_compare.sql's
-- backlog_rows); PyMySQL folds a chunk of them into one multi-row INSERT only when the
-- statement starts with INSERT, so the block holds no comment. Its times are the columns'
-- defaults, in the session's UTC.

-- name: bench_database_create
CREATE DATABASE `{dbname}`;

-- name: bench_database_drop
DROP DATABASE IF EXISTS `{dbname}`;

-- name: backlog_insert
INSERT INTO outbox_events (event_id, topic, `key`, shard, event_type, payload, headers)
VALUES (%(event_id)s, %(topic)s, %(key)s, %(shard)s, %(event_type)s, %(payload)s, %(headers)s);

-- name: outbox_analyze
ANALYZE TABLE outbox_events;

-- name: outbox_any_left
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL);

-- name: outbox_unpublished_seqs
SELECT CAST(JSON_VALUE(CONVERT(payload USING utf8mb4), '$.seq') AS SIGNED)
FROM outbox_events
WHERE published_at IS NULL;
