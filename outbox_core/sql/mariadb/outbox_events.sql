-- Queries on outbox_events, MariaDB dialect (pyformat parameters, rendered by the driver
-- on the client). `key` is a reserved word here: always quoted. Lists arrive as JSON
-- arrays (outbox_core.codec) and are read with JSON_TABLE; times are UTC (the sessions'
-- time_zone), so NOW(6) and SYSDATE(6) compare with the stored DATETIME(6) values.

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
-- One event (emit_batch: run once per event, which the MySQL drivers send as one
-- multi-row INSERT). Times are UTC whatever the caller's session time_zone: the columns hold UTC,
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

-- fragment: claim_columns
-- What every claim returns, named as relay.store.ClaimedRow's fields (rows are read by
-- name); payload and headers pass through undecoded, created_at as float epoch seconds.
e.id, e.shard, e.event_id, e.topic, e.`key`, e.event_type, e.payload, e.headers AS headers_json,
e.attempts, CAST(UNIX_TIMESTAMP(e.created_at) AS DOUBLE) AS created_at, e.tenant

-- fragment: upto
-- The byte budget (see the Postgres twin), over rows r already cut to the claim's limit
-- per shard: the window is computed over at most `limit` rows a shard, never over all of
-- a shard's backlog. r and the window's result w hold ids, shards and sizes only; the
-- claimed rows are read after the budget cut them (claimed_rows). A derived table with a
-- BLOB column (payload, headers) is materialized as an Aria table on disk, one without as
-- a MEMORY table: the two with every column took half of a claim statement's time in the
-- server (decision 31).
sum(r.size) OVER (PARTITION BY r.shard ORDER BY r.id ROWS UNBOUNDED PRECEDING) AS upto

-- fragment: shard_rows
-- See the Postgres twin; head is the first shard of the claim's array.
(w.upto <= %(shard_bytes)s OR (w.upto = w.size AND w.shard = %(head)s))

-- fragment: claimed_rows
-- The rows the budget kept (w: ids, shards, sizes, upto), read by primary key in id
-- order: w is sorted (a few ids) and each row joined to it (eq_ref). The same statement,
-- so the same read view: each row as the claim saw it.
STRAIGHT_JOIN outbox_events e FORCE INDEX (PRIMARY) ON e.id = w.id
WHERE {{shard_rows}}
ORDER BY w.id

-- fragment: union_part_order
-- A claim of one shard is a part of a UNION ALL (relay/store/sql.py), where MariaDB keeps
-- a part's ORDER BY only when the part has a LIMIT: this one cuts nothing (w holds at
-- most limit rows).
LIMIT %(limit)s

-- fragment: not_held
AND e.`key` NOT IN (
    SELECT h.k FROM JSON_TABLE(%(held_keys)s, '$[*]' COLUMNS (
        k varchar(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')) AS h
)

-- fragment: claim_clock
-- The claim's clock. SYSDATE(6) is read when it is evaluated, as each row is read, so
-- after the statement's read view was opened (at READ COMMITTED InnoDB opens a fresh one
-- at the statement's first read); NOW(6) would be the statement's start, before it. A
-- row's available_at is its INSERT's UTC_TIMESTAMP(6), read at that statement's start
-- (+ its delay): every row the read view sees was committed, so written, before the
-- clock is read, and a row written without a delay is due. Rows of one key are written
-- one after the other (outbox_key_locks_take: the next writer's INSERT starts after the
-- previous one committed), so a later row of a key is committed, and due, only after its
-- earlier rows are: no committed row is skipped while a later row of its key goes. (A
-- server started with --sysdate-is-now would make this NOW(6) again.)
SYSDATE(6)

-- fragment: claimable
-- See the Postgres twin: a row of the shard that may go out now, its key's order aside.
e.published_at IS NULL
AND e.status = 'pending'
AND e.available_at <= {{claim_clock}}
AND e.id NOT IN (
    SELECT f.id FROM JSON_TABLE(%(in_flight)s, '$[*]' COLUMNS (id bigint PATH '$')) AS f
)

-- fragment: key_not_blocked
-- block_key policy (see the Postgres twin); the skip policy fills this slot with nothing.
-- blocking is 1 on the unpublished rows that are parked or failed at least once
-- (migrations/mariadb/0007_blocking_rows.sql): outbox_events_blocking_idx (blocking,
-- shard, key, id) seeks a key's earlier such rows only, as Postgres's partial index does.
AND NOT EXISTS (
    SELECT 1 FROM outbox_events b
    WHERE b.blocking = 1 AND b.shard = e.shard AND b.`key` = e.`key` AND b.id < e.id
      AND b.published_at IS NULL
      AND (b.status = 'parked' OR (b.attempts > 0 AND b.available_at > {{claim_clock}}))
)

-- fragment: one_tenant
AND coalesce(e.tenant, '') = %(tenant)s

-- fragment: claim_per_shard(tenant, rule)
-- MariaDB has no LATERAL: a claim is this once per shard, the parts of one UNION ALL
-- (relay/store/sql.py), each a walk of outbox_events_unpublished_idx (shard,
-- published_at, id) in id order that stops after limit rows. The statement reads one
-- snapshot, opened at its first read, for every shard; a shard's rows are ordered among
-- themselves only.
SELECT {{claim_columns}} FROM (
    SELECT r.id, r.shard, r.size, {{upto}}
    FROM (
        SELECT e.id, e.shard, length(e.payload) AS size
        FROM outbox_events e
        WHERE e.shard = %(shard)s
          {{tenant}}
          AND {{claimable}}
          {{not_held}}
          {{rule}}
        ORDER BY e.id
        LIMIT %(limit)s
    ) AS r
) AS w
{{claimed_rows}}
{{union_part_order}}

-- fragment: backlogged
-- Shard s has more than limit unpublished rows: a walk of outbox_events_unpublished_idx
-- that stops at the (limit + 1)th entry.
((SELECT u.id FROM outbox_events u
  WHERE u.shard = s.shard AND u.published_at IS NULL
  ORDER BY u.id
  LIMIT 1 OFFSET %(limit)s) IS NOT NULL)

-- fragment: shards_unpublished
-- Of the claim's shards (a JSON array), those with an unpublished row, and whether they
-- have a backlog, more than limit (many): a seek of outbox_events_unpublished_idx each,
-- and a walk of at most limit + 1 entries. A claim's part costs the server about half a
-- millisecond even when its shard has nothing (parsing, planning, its derived tables), so
-- the store claims only the shards this names (relay/store/sql.py). Rows committed after
-- it are claimed by the next cycle, as rows committed after a claim are.
SELECT s.shard, {{backlogged}} AS many
FROM JSON_TABLE(%(shards)s, '$[*]' COLUMNS (shard smallint PATH '$')) AS s
WHERE EXISTS (
    SELECT 1 FROM outbox_events e WHERE e.shard = s.shard AND e.published_at IS NULL
)

-- name: outbox_shards_unpublished
{{shards_unpublished}};

-- fragment: claim_of_shards(rule)
-- The plain claim of the shards without a backlog (at most limit unpublished rows) in
-- one statement: it reads every claimable row of them, each shard's through
-- outbox_events_unpublished_idx, so it returns what their per-shard parts would
-- (claim_per_shard: a shard's first limit claimable rows), for the price of one part. A
-- shard with a backlog is left out (backlogged, judged in the statement's own read
-- view): the store claims it with a part of its own, whose walk stops after limit rows.
-- The array (distinct shards) is read first, the condition judged once a shard, and each
-- shard's unpublished rows read through the index (ref on shard, published_at): joined
-- as `IN (...)`, the optimizer may scan the table.
SELECT {{claim_columns}} FROM (
    SELECT r.id, r.shard, r.size, {{upto}}
    FROM (
        SELECT e.id, e.shard, length(e.payload) AS size
        FROM JSON_TABLE(%(shards)s, '$[*]' COLUMNS (shard smallint PATH '$')) AS s
        STRAIGHT_JOIN outbox_events e FORCE INDEX (outbox_events_unpublished_idx)
          ON e.shard = s.shard
        WHERE NOT {{backlogged}}
          AND {{claimable}}
          {{not_held}}
          {{rule}}
    ) AS r
) AS w
{{claimed_rows}}

-- name: outbox_claim_shards
-- The plain claim (outbox_claim_batch) in one round trip, two statements: which shards
-- have rows and which a backlog (shards_unpublished), then the rows of those without a
-- backlog (claim_of_shards). Two result sets, read apart (relay/store/sql.py).
{{shards_unpublished}};
{{claim_of_shards(rule=key_not_blocked)}};

-- name: outbox_claim_shards_skip
{{shards_unpublished}};
{{claim_of_shards(rule=nothing)}};

-- fragment: tenant_list
-- A JSON array of tenant names as rows t ('' names the untenanted rows).
'$[*]' COLUMNS (i FOR ORDINALITY,
                t varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')

-- fragment: claim_by_turns(rule)
-- See the Postgres twin for the turns. A part of the claim's UNION ALL, like the plain
-- claim, so derived tables where the Postgres twin has a WITH (a union's part cannot
-- start with one). Without LATERAL, a tenant's first per_tenant rows are found by
-- numbering the shard's claimable rows per tenant (one walk of the shard's unpublished
-- rows); only ids are ranked (c), the turns (the weights w) choose limit of them (ch),
-- then the chosen rows are read by primary key.
SELECT {{claim_columns}} FROM (
    SELECT r.id, r.shard, r.size, {{upto}}
    FROM (
        SELECT e.id, e.shard, length(e.payload) AS size
        FROM (
            SELECT c.id
            FROM (
                SELECT c.id, c.tenant,
                       row_number() OVER (PARTITION BY c.tenant ORDER BY c.id) AS k
                FROM (
                    SELECT e.id, coalesce(e.tenant, '') AS tenant
                    FROM outbox_events e
                    WHERE e.shard = %(shard)s
                      AND {{claimable}}
                      {{not_held}}
                      {{rule}}
                ) AS c
                WHERE (%(only)s IS NULL
                       OR c.tenant IN (SELECT o.t FROM JSON_TABLE(%(only)s, {{tenant_list}}) AS o))
                  AND c.tenant NOT IN (SELECT s.t FROM JSON_TABLE(%(skip)s, {{tenant_list}}) AS s)
            ) AS c
            LEFT JOIN (
                SELECT n.t AS tenant, w.weight
                FROM JSON_TABLE(%(weight_tenants)s, {{tenant_list}}) AS n
                JOIN JSON_TABLE(%(weights)s, '$[*]' COLUMNS (i FOR ORDINALITY, weight int PATH '$')) AS w
                  ON w.i = n.i
            ) AS w ON w.tenant = c.tenant
            WHERE c.k <= %(per_tenant)s
            ORDER BY (c.k - 1) DIV coalesce(w.weight, 1), c.id
            LIMIT %(limit)s
        ) AS ch
        JOIN outbox_events e ON e.id = ch.id
    ) AS r
) AS w
{{claimed_rows}}
{{union_part_order}}

-- fragment: ids_first(id_list)
-- Writes by a JSON array of ids join it, read first (STRAIGHT_JOIN), to the rows by
-- primary key (FORCE INDEX): a write locks every row it reads, and waits for a row a
-- producer inserted and has not committed yet. MariaDB 10.11 runs `id IN (SELECT ...)`
-- in a single-table UPDATE or DELETE as a scan of the table, and joins a small table by
-- scanning it into a join buffer: either read every row, the uncommitted ones included.
JSON_TABLE({{id_list}}, '$[*]' COLUMNS (id bigint PATH '$')) AS a
STRAIGHT_JOIN outbox_events e FORCE INDEX (PRIMARY) ON e.id = a.id

-- fragment: published_ids
%(published_ids)s

-- fragment: in_held_shards
-- The settle's rows, of the shards whose lease still carries our token (the settle
-- checked and locked each lease row first: lease_check): shards is the JSON array of them.
e.shard IN (SELECT h.shard FROM JSON_TABLE(%(shards)s, '$[*]' COLUMNS (shard smallint PATH '$')) AS h)

-- fragment: payload_moves
-- retention=keep: see the Postgres twin's payload_stays; a payload up to move_max_bytes
-- is copied into the history, a larger one's row is marked published where it is.
length(e.payload) <= %(move_max_bytes)s

-- fragment: delete_acked
DELETE e FROM {{ids_first(id_list=published_ids)}}
WHERE {{in_held_shards}}

-- fragment: published_copy
-- retention=keep, the first step of the move: the acked rows into the history. The next
-- step (delete_moved) deletes the same rows: between the two nothing but this settle
-- writes them (the lease rows it holds locked fence out every other relay).
INSERT INTO outbox_published (id, event_id, topic, `key`, shard, event_type, payload, headers,
                              created_at, attempts, last_error, published_at, tenant)
SELECT e.id, e.event_id, e.topic, e.`key`, e.shard, e.event_type, e.payload, e.headers,
       e.created_at, e.attempts, e.last_error, NOW(6), e.tenant
FROM {{ids_first(id_list=published_ids)}}
WHERE {{in_held_shards}} AND {{payload_moves}}

-- fragment: delete_moved
DELETE e FROM {{ids_first(id_list=published_ids)}}
WHERE {{in_held_shards}} AND {{payload_moves}}

-- fragment: mark_too_large
-- retention=keep, rows too large to move: marked published where they are.
UPDATE {{ids_first(id_list=published_ids)}}
SET e.published_at = NOW(6)
WHERE {{in_held_shards}} AND NOT {{payload_moves}}

-- fragment: record_failures
-- failed_ids, errors, delays_s and parks: JSON arrays paired by position (empty arrays:
-- nothing to read, nothing changed). Every matched row changes (attempts grows), so
-- ROW_COUNT() counts them.
UPDATE JSON_TABLE(%(failed_ids)s, '$[*]' COLUMNS (i FOR ORDINALITY, id bigint PATH '$')) AS f
JOIN JSON_TABLE(%(errors)s, '$[*]' COLUMNS (i FOR ORDINALITY, error text PATH '$')) AS r
  ON r.i = f.i
JOIN JSON_TABLE(%(delays_s)s, '$[*]' COLUMNS (i FOR ORDINALITY, delay_s double PATH '$')) AS d
  ON d.i = f.i
JOIN JSON_TABLE(%(parks)s, '$[*]' COLUMNS (i FOR ORDINALITY, park boolean PATH '$')) AS p
  ON p.i = f.i
STRAIGHT_JOIN outbox_events e FORCE INDEX (PRIMARY) ON e.id = f.id
SET e.attempts = e.attempts + 1,
    e.last_error = r.error,
    e.available_at = TIMESTAMPADD(MICROSECOND, ROUND(d.delay_s * 1000000), NOW(6)),
    e.status = CASE WHEN p.park THEN 'parked' ELSE 'pending' END
WHERE {{in_held_shards}}

-- fragment: failures_counted
-- The failures' write and its count, for a settle with failures only (relay/store/sql.py:
-- a multi-table UPDATE setting last_error, a TEXT column, from another table writes a
-- temporary table on disk, even when it changes no row).
{{record_failures}};
SELECT ROW_COUNT()

-- fragment: deleted_counted
{{delete_acked}};
SELECT ROW_COUNT()

-- fragment: kept_counted
-- retention=keep: the rows moved, then the rows marked in place, each counted.
{{published_copy}};
{{delete_moved}};
SELECT ROW_COUNT();
{{mark_too_large}};
SELECT ROW_COUNT()

-- name: outbox_settle_delete_steps
-- The settle after its fence (lease_check), in the same transaction (relay/store/sql.py):
-- several statements, sent in one round trip and run in order. No write returns its rows
-- (a multi-table write has no RETURNING): a SELECT ROW_COUNT() after each counts them, so
-- the result sets are the rows published (then, in the _failed twin, the rows failed).
{{deleted_counted}};

-- name: outbox_settle_delete_failed_steps
{{deleted_counted}};
{{failures_counted}};

-- name: outbox_settle_keep_steps
-- retention=keep, as outbox_settle_delete_steps: the rows moved, the rows marked in
-- place (then, in the _failed twin, the rows failed).
{{kept_counted}};

-- name: outbox_settle_keep_failed_steps
{{kept_counted}};
{{failures_counted}};

-- name: outbox_purge_published
-- Retention: removes a small batch of rows published before the cutoff; run repeatedly.
DELETE FROM outbox_events
WHERE published_at IS NOT NULL
  AND published_at < TIMESTAMPADD(MICROSECOND, -ROUND(%(retention_s)s * 1000000), NOW(6))
ORDER BY published_at
LIMIT %(limit)s
RETURNING 1;

-- name: outbox_shard_max
SELECT coalesce(max(shard), -1) FROM outbox_events WHERE published_at IS NULL;

-- fragment: backlog_rows
-- MariaDB has no claim floors (an InnoDB purge removes deleted rows' index entries
-- without waiting for a vacuum): every unpublished row is counted.
outbox_events e

-- name: outbox_backlog
-- The counts stop at count_limit rows, so a refresh costs the same over any backlog.
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM {{backlog_rows}} WHERE e.published_at IS NULL AND e.status = 'pending'
        LIMIT %(count_limit)s) AS c),
    (SELECT count(*) FROM (
        SELECT 1 FROM {{backlog_rows}} WHERE e.published_at IS NULL AND e.status = 'parked'
        LIMIT %(count_limit)s) AS c),
    coalesce((SELECT TIMESTAMPDIFF(MICROSECOND, min(e.created_at), NOW(6)) / 1e6
              FROM {{backlog_rows}} WHERE e.published_at IS NULL AND e.status = 'pending'), 0);

-- name: outbox_backlog_by_tenant
{{tenants_by_pending(rows=backlog_rows)}}
SELECT CASE WHEN other THEN NULL ELSE tenant END AS tenant, other, sum(pending),
       TIMESTAMPDIFF(MICROSECOND, min(oldest), NOW(6)) / 1e6
FROM ranked
GROUP BY 1, 2
ORDER BY 2, min(place);

-- fragment: listed_ids
-- The operator commands' ids: a JSON array, or NULL for any.
(%(ids)s IS NULL OR id IN (
    SELECT l.id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id bigint PATH '$')) AS l))

-- fragment: action_ids
%(ids)s

-- fragment: parked
e.status = 'parked' AND e.published_at IS NULL

-- name: outbox_parked_list
SELECT id, event_id, topic, `key`, event_type, attempts, last_error,
       TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) / 1e6 AS age_s
FROM outbox_events
WHERE status = 'parked' AND published_at IS NULL
  AND {{listed_ids}}
  AND (%(topic)s IS NULL OR topic = %(topic)s)
  AND (%(key)s IS NULL OR `key` = %(key)s)
  AND (%(error)s IS NULL OR instr(last_error, %(error)s) > 0)
  AND created_at <= TIMESTAMPADD(MICROSECOND, -ROUND(%(min_age_s)s * 1000000), NOW(6))
ORDER BY id
LIMIT %(limit)s;

-- name: outbox_parked_retry_pick
-- No UPDATE ... RETURNING: the operator actions pick and lock their rows first, then
-- change exactly those (relay/store/plans.py), in one transaction.
SELECT e.id FROM {{ids_first(id_list=action_ids)}} WHERE {{parked}} FOR UPDATE;

-- name: outbox_parked_retry
UPDATE {{ids_first(id_list=action_ids)}}
SET e.status = 'pending', e.attempts = 0, e.available_at = NOW(6)
WHERE {{parked}};

-- name: outbox_parked_discard_pick
SELECT e.id FROM {{ids_first(id_list=action_ids)}} WHERE {{parked}} FOR UPDATE;

-- name: outbox_parked_discard
DELETE e FROM {{ids_first(id_list=action_ids)}} WHERE {{parked}};

-- name: outbox_replay_list
-- See the Postgres twin: rows in outbox_published, and rows marked published in place.
SELECT id FROM (
    SELECT id, published_at FROM outbox_published
    UNION ALL
    SELECT id, published_at FROM outbox_events WHERE published_at IS NOT NULL
) AS p
WHERE {{listed_ids}}
  AND (%(since)s IS NULL OR published_at >= %(since)s)
  AND (%(until)s IS NULL OR published_at < %(until)s)
ORDER BY id
LIMIT %(limit)s;

-- name: outbox_replay_pick
(SELECT p.id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id bigint PATH '$')) AS a
 STRAIGHT_JOIN outbox_published p FORCE INDEX (PRIMARY) ON p.id = a.id FOR UPDATE)
UNION ALL
(SELECT e.id FROM {{ids_first(id_list=action_ids)}} WHERE e.published_at IS NOT NULL FOR UPDATE);

-- name: outbox_replay_unmark
-- Rows marked published in place become pending again (before the history's rows come
-- back, which arrive pending).
UPDATE {{ids_first(id_list=action_ids)}}
SET e.published_at = NULL, e.status = 'pending', e.attempts = 0, e.available_at = NOW(6)
WHERE e.published_at IS NOT NULL;

-- name: outbox_replay_restore
-- History rows move back into outbox_events under their original ids (an AUTO_INCREMENT
-- column takes an explicit value), pending again.
INSERT INTO outbox_events (id, event_id, topic, `key`, shard, event_type, payload, headers,
                           created_at, available_at, tenant)
SELECT p.id, p.event_id, p.topic, p.`key`, p.shard, p.event_type, p.payload, p.headers,
       p.created_at, NOW(6), p.tenant
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id bigint PATH '$')) AS a
STRAIGHT_JOIN outbox_published p FORCE INDEX (PRIMARY) ON p.id = a.id;

-- name: outbox_replay_restored_drop
DELETE p FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (id bigint PATH '$')) AS a
STRAIGHT_JOIN outbox_published p FORCE INDEX (PRIMARY) ON p.id = a.id;
