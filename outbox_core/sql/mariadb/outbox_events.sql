-- Queries on outbox_events, MariaDB dialect (PyMySQL pyformat parameters). So far what
-- producer_lib's emit and the migrator need; the shared statements
-- (sql/shared/outbox_events.sql) join once this file writes their fragments.

-- producer_lib: emit and emit_batch -------------------------------------------------------

-- name: outbox_key_locks_take
-- The per-key lock (docs/decisions/0027-mariadb-per-key-order.md): the keys' slot rows of
-- outbox_key_locks, locked to the caller's commit, before the insert draws its ids. slots
-- is a JSON array. STRAIGHT_JOIN reads the array first and each slot row by an exact
-- primary-key match (eq_ref): InnoDB takes record locks only, never a gap lock, at READ
-- COMMITTED and at REPEATABLE READ alike. The array is sorted before the join (EXPLAIN:
-- filesort on j), so the rows are locked in ascending order and two batches never
-- deadlock; the caller sorts it too.
SELECT k.slot
FROM JSON_TABLE(%(slots)s, '$[*]' COLUMNS (slot integer PATH '$')) AS j
STRAIGHT_JOIN outbox_key_locks AS k ON k.slot = j.slot
ORDER BY k.slot
FOR UPDATE;

-- name: outbox_insert
-- One event (emit_batch: run once per event, which PyMySQL sends as one multi-row
-- INSERT). Times are UTC whatever the caller's session time_zone: the columns hold UTC,
-- and their CURRENT_TIMESTAMP defaults would be the session's local time. One statement
-- reads UTC_TIMESTAMP once, so available_at - created_at is the delay exactly.
INSERT INTO outbox_events (event_id, topic, `key`, shard, event_type, payload, headers,
                           created_at, available_at, tenant)
VALUES (%(event_id)s, %(topic)s, %(key)s, %(shard)s, %(event_type)s, %(payload)s, %(headers)s,
        UTC_TIMESTAMP(6),
        COALESCE(%(available_at)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND),
        %(tenant)s);

-- relay and migrator -----------------------------------------------------------------------

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
