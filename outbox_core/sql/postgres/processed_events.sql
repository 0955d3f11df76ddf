-- Queries on processed_events (consumer_lib's dedup table), Postgres dialect.

-- name: processed_event_insert
-- In the handler's transaction: a row back means first time; none means duplicate.
-- A concurrent transaction inserting the same pair makes this wait for its outcome.
INSERT INTO processed_events (consumer_group, event_id)
VALUES (%(consumer_group)s, %(event_id)s)
ON CONFLICT (consumer_group, event_id) DO NOTHING
RETURNING 1;

-- name: processed_event_purge
-- One group's rows past that group's own retention: groups sharing a database keep their
-- own replay windows. processed_events_group_age_idx finds them without the others'.
DELETE FROM processed_events
WHERE consumer_group = %(consumer_group)s AND event_id IN (
    SELECT event_id FROM processed_events
    WHERE consumer_group = %(consumer_group)s
      AND processed_at < now() - %(retention_s)s * interval '1 second'
    LIMIT %(limit)s
)
RETURNING 1;

-- name: processed_event_insert_batch
-- A batch's dedup in one statement: the event_ids back are the ones recorded for the first
-- time (run their handlers); the rest were applied before. Sorted, so two transactions
-- recording overlapping batches take the row locks in one order and cannot deadlock.
INSERT INTO processed_events (consumer_group, event_id)
SELECT %(consumer_group)s, e
FROM (SELECT DISTINCT unnest(%(event_ids)s::uuid[]) AS e ORDER BY 1) AS ids
ON CONFLICT (consumer_group, event_id) DO NOTHING
RETURNING event_id::text;
