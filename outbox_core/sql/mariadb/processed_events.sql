-- Queries on processed_events (consumer_lib's dedup table), MariaDB dialect.
--
-- The consumer's sessions are the application's (its engine), in whatever time zone and
-- isolation level it chose: processed_at is written and compared in UTC explicitly, and
-- the dedup is right at READ COMMITTED and at REPEATABLE READ (the server's default).

-- fragment: record_new(ids)
-- The event_ids of `ids` (a JSON array of strings) not yet recorded for the group,
-- inserted in sorted order (two transactions recording overlapping batches lock the keys
-- in one order). Each id is read twice: `event_id` whole (what is inserted: an id the
-- column cannot hold fails the statement, never stored cut short) and `probe`, the same
-- in the key's type, so the lookup is one primary-key probe (compared as longtext it would
-- scan the group's rows); an id the probe mangled finds no row and fails at the insert.
-- Not INSERT IGNORE: it would turn every other error (an id too long, a NULL) into a
-- warning. Not ON DUPLICATE KEY UPDATE: RETURNING gives back the duplicates too.
-- At REPEATABLE READ the NOT EXISTS is a locking read: a row another transaction inserted
-- and has not committed yet is waited for, then seen or not, as ON CONFLICT DO NOTHING
-- does. At READ COMMITTED it reads the last committed rows without waiting; the insert
-- then waits on that row and fails with a duplicate key (1062) if the other transaction
-- commits. Only the statement rolls back; consumer_lib runs it again in the same
-- transaction (consumer_lib/work.py), and the next run sees the row committed.
INSERT INTO processed_events (consumer_group, event_id, processed_at)
SELECT DISTINCT %(consumer_group)s, j.event_id, UTC_TIMESTAMP(6)
FROM JSON_TABLE({{ids}}, '$[*]' COLUMNS (
    event_id longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$',
    probe char(36) CHARACTER SET ascii COLLATE ascii_bin PATH '$'
)) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM processed_events AS p
    WHERE p.consumer_group = %(consumer_group)s AND p.event_id = j.probe
      AND j.probe = j.event_id
)
ORDER BY j.event_id

-- fragment: one_id
JSON_ARRAY(%(event_id)s)

-- fragment: id_list
%(event_ids)s

-- name: processed_event_insert
-- In the handler's transaction: a row back means first time; none means duplicate.
{{record_new(ids=one_id)}}
RETURNING 1;

-- name: processed_event_insert_batch
-- A batch's dedup in one statement: the event_ids back are the ones recorded for the first
-- time (run their handlers); the rest were applied before.
{{record_new(ids=id_list)}}
RETURNING event_id;

-- name: processed_event_purge
-- One group's rows past that group's own retention, oldest first, at most `limit` of them
-- (processed_events_group_age_idx finds them without the other groups' rows).
DELETE FROM processed_events
WHERE consumer_group = %(consumer_group)s
  AND processed_at < UTC_TIMESTAMP(6) - INTERVAL %(retention_s)s SECOND
ORDER BY processed_at
LIMIT %(limit)s
RETURNING 1;
