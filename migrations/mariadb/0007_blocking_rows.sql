-- The block_key rule's probe of a key's earlier rows (outbox_core/sql/mariadb/
-- outbox_events.sql, key_not_blocked) seeks only the rows that can block: MariaDB has no
-- partial index, so a virtual column says which rows Postgres's partial
-- outbox_events_blocking_idx would hold (unpublished and parked, or failed at least once:
-- 1, else NULL), and the index leads with it. The index it replaces, (shard, key, id),
-- held every row and none of the columns the rule judges: the probe read each earlier
-- unpublished row of a key by primary key, half of a claim's time
-- (docs/decisions/0031-mariadb-claim-in-one-round-trip.md).
-- Two statements: the virtual column alone is instant (nothing is stored in the rows),
-- and the index swap alone runs online (writers go on while the index is built); the
-- server cannot do both in one statement without blocking writes. Run again after a
-- stop, the column is kept and the index rebuilt; the swap is one statement, so a stop
-- leaves the old index or the new one, never neither.
ALTER TABLE outbox_events
    ADD COLUMN IF NOT EXISTS blocking tinyint AS (
        CASE WHEN published_at IS NULL AND (status = 'parked' OR attempts > 0) THEN 1 END
    ) VIRTUAL;

ALTER TABLE outbox_events
    DROP INDEX IF EXISTS outbox_events_blocking_idx,
    ADD INDEX outbox_events_blocking_idx (blocking, shard, `key`(250), id);
