-- The per-key lock of producer_lib's emit (docs/decisions/0027-mariadb-per-key-order.md),
-- MariaDB only: InnoDB has no transaction-scoped advisory lock, so a key's writers queue on
-- a row lock instead, taken with SELECT ... FOR UPDATE on the key's slot and held to
-- commit. The rows are never changed: a slot row exists only to be locked. 4096 slots
-- (outbox_core.sharding.KEY_LOCK_SLOTS, which must equal the number of rows): two keys
-- share a slot one time in 4096, which only makes their writers queue together.
CREATE TABLE IF NOT EXISTS outbox_key_locks (
    slot integer NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- 0..4095 as three base-16 digits (no sequence engine or deep recursion needed, so MySQL
-- runs it too); IGNORE: run again after a stop, the rows already there are kept.
INSERT IGNORE INTO outbox_key_locks (slot)
SELECT a.d + 16 * b.d + 256 * c.d
FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS a
CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS b
CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS c;
