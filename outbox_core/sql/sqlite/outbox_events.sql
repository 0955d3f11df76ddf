-- Queries on outbox_events, SQLite dialect (named parameters). SQLite has one writer at
-- a time, so ids already follow commit order: no per-key lock is needed.

-- name: outbox_insert
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at,
                           tenant)
VALUES (:event_id, :topic, :key, :shard, :event_type, :payload, :headers,
        COALESCE(:available_at,
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || :delay_s || ' seconds')),
        :tenant);

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- fragment: claim_columns
-- What every claim returns, named as relay.store.ClaimedRow's fields (rows are read by
-- name); payload and headers pass through undecoded.
e.id, e.shard, e.event_id, e.topic, e.key, e.event_type, e.payload, e.headers AS headers_json,
e.attempts, (julianday(e.created_at) - 2440587.5) * 86400.0 AS created_at, e.tenant

-- fragment: claim_names
w.id, w.shard, w.event_id, w.topic, w.key, w.event_type, w.payload, w.headers_json,
w.attempts, w.created_at, w.tenant

-- fragment: shard_bytes
-- See the Postgres twin (length of a BLOB reads its stored size, not its content).
length(e.payload) AS size,
sum(length(e.payload)) OVER (ORDER BY e.id ROWS UNBOUNDED PRECEDING) AS upto

-- fragment: shard_rows
-- See the Postgres twin; head is 1 for the first shard of the claim's array.
(w.upto <= :shard_bytes OR (w.upto = w.size AND :head))

-- fragment: not_held
AND e.key NOT IN (SELECT value FROM json_each(:held_keys))

-- fragment: claimable
-- See the Postgres twin: a row of the shard that may go out now, its key's order aside.
e.published_at IS NULL
AND e.status = 'pending'
AND e.available_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
AND e.id NOT IN (SELECT value FROM json_each(:in_flight))

-- fragment: key_not_blocked
-- block_key policy (see the Postgres twin); the skip policy fills this slot with nothing.
AND NOT EXISTS (
    SELECT 1 FROM outbox_events b
    WHERE b.shard = e.shard AND b.key = e.key AND b.id < e.id
      AND b.published_at IS NULL
      -- Implied by the next line; written out because it is the predicate of the
      -- partial index outbox_events_blocking_idx, which the planner uses only when a
      -- query states it.
      AND (b.status = 'parked' OR b.attempts > 0)
      AND (b.status = 'parked' OR (b.attempts > 0 AND b.available_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))
)

-- fragment: one_tenant
AND coalesce(e.tenant, '') = :tenant

-- fragment: claim_per_shard(tenant, rule)
-- SQLite has no LATERAL: the store runs a claim once per shard, all in one hop to the
-- database thread (in-process, so a statement per shard costs no round trip).
SELECT {{claim_names}} FROM (
    SELECT {{claim_columns}}, {{shard_bytes}}
    FROM outbox_events e
    WHERE e.shard = :shard
      {{tenant}}
      AND {{claimable}}
      {{not_held}}
      {{rule}}
    ORDER BY e.id
    LIMIT :limit
) AS w
WHERE {{shard_rows}}
ORDER BY w.id

-- fragment: claim_by_turns(rule)
-- See the Postgres twin for the turns. Run once per shard, like the plain claim; each
-- tenant's ids are picked by a correlated id list (SQLite has no LATERAL) walking
-- outbox_events_tenant_idx; only ids are ranked, then the chosen rows are read.
WITH RECURSIVE tenants(tenant) AS (
    SELECT (SELECT coalesce(e.tenant, '') FROM outbox_events e
            WHERE e.shard = :shard AND e.published_at IS NULL
            ORDER BY coalesce(e.tenant, '') DESC, e.id DESC
            LIMIT 1)
    UNION ALL
    SELECT (SELECT coalesce(e.tenant, '') FROM outbox_events e
            WHERE e.shard = :shard AND e.published_at IS NULL
              AND coalesce(e.tenant, '') < t.tenant
            ORDER BY coalesce(e.tenant, '') DESC, e.id DESC
            LIMIT 1)
    FROM tenants t
    WHERE t.tenant IS NOT NULL
),
weights(tenant, weight) AS (
    SELECT n.value, w.value
    FROM json_each(:weight_tenants) AS n JOIN json_each(:weights) AS w USING (key)
),
candidates AS (
    SELECT c.id,
           (row_number() OVER (PARTITION BY t.tenant ORDER BY c.id) - 1)
               / coalesce(w.weight, 1) AS turn
    FROM tenants t
    LEFT JOIN weights w ON w.tenant = t.tenant
    JOIN outbox_events c ON c.id IN (
        SELECT e.id FROM outbox_events e
        WHERE e.shard = :shard
          AND coalesce(e.tenant, '') = t.tenant
          AND {{claimable}}
          {{not_held}}
          {{rule}}
        ORDER BY e.id
        LIMIT :per_tenant
    )
    WHERE t.tenant IS NOT NULL
      AND (:only IS NULL OR t.tenant IN (SELECT value FROM json_each(:only)))
      AND t.tenant NOT IN (SELECT value FROM json_each(:skip))
)
SELECT {{claim_names}} FROM (
    SELECT {{claim_columns}}, {{shard_bytes}}
    FROM outbox_events e
    WHERE e.id IN (SELECT id FROM candidates ORDER BY turn, id LIMIT :limit)
) AS w
WHERE {{shard_rows}}
ORDER BY w.id

-- fragment: acked_in_held_shards
WHERE id IN (SELECT value FROM json_each(:published_ids))
  AND shard IN (SELECT value FROM json_each(:shards))
RETURNING 1

-- name: outbox_delete_published
-- The settle, in steps inside database_begin_immediate after lease_check of each shard
-- (the write lock is the fence); shards is the JSON array of those still held. Each
-- returns a row per row changed.
DELETE FROM outbox_events
{{acked_in_held_shards}};

-- name: outbox_mark_published
UPDATE outbox_events SET published_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
{{acked_in_held_shards}};

-- name: outbox_record_failures
-- failed_ids, errors, delays_s and parks: JSON arrays paired by position.
UPDATE outbox_events
SET attempts = attempts + 1,
    last_error = f.error,
    available_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || f.delay_s || ' seconds'),
    status = CASE WHEN f.park THEN 'parked' ELSE 'pending' END
FROM (
    SELECT i.value AS id, e.value AS error, printf('%.3f', d.value) AS delay_s, p.value AS park
    FROM json_each(:failed_ids) AS i
    JOIN json_each(:errors) AS e USING (key)
    JOIN json_each(:delays_s) AS d USING (key)
    JOIN json_each(:parks) AS p USING (key)
) AS f
WHERE outbox_events.id = f.id
  AND outbox_events.shard IN (SELECT value FROM json_each(:shards))
RETURNING 1;

-- name: outbox_purge_published
DELETE FROM outbox_events
WHERE id IN (
    SELECT id FROM outbox_events
    WHERE published_at IS NOT NULL
      AND published_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || :retention_s || ' seconds')
    ORDER BY published_at
    LIMIT :limit
)
RETURNING 1;

-- name: outbox_shard_max
SELECT coalesce(max(shard), -1) FROM outbox_events WHERE published_at IS NULL;

-- name: outbox_backlog
-- The counts stop at count_limit rows, so a refresh costs the same over any backlog.
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM outbox_events WHERE published_at IS NULL AND status = 'pending'
        LIMIT :count_limit)),
    (SELECT count(*) FROM (
        SELECT 1 FROM outbox_events WHERE published_at IS NULL AND status = 'parked'
        LIMIT :count_limit)),
    coalesce((SELECT (julianday('now') - julianday(min(created_at))) * 86400.0
              FROM outbox_events WHERE published_at IS NULL AND status = 'pending'), 0)
    + 0 * :shard_count;

-- fragment: backlog_rows
outbox_events e

-- name: outbox_backlog_by_tenant
{{tenants_by_pending(rows=backlog_rows)}}
SELECT CASE WHEN other THEN NULL ELSE tenant END, other, sum(pending),
       (julianday('now') - julianday(min(oldest))) * 86400.0
FROM ranked
GROUP BY 1, 2
ORDER BY 2, min(place);

-- name: outbox_parked_list
SELECT id, event_id, topic, key, event_type, attempts, last_error,
       (julianday('now') - julianday(created_at)) * 86400.0 AS age_s
FROM outbox_events
WHERE status = 'parked' AND published_at IS NULL
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:topic IS NULL OR topic = :topic)
  AND (:key IS NULL OR key = :key)
  AND (:error IS NULL OR instr(last_error, :error) > 0)
  AND created_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || :min_age_s || ' seconds')
ORDER BY id
LIMIT :limit;

-- name: outbox_parked_retry
UPDATE outbox_events
SET status = 'pending', attempts = 0, available_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE status = 'parked' AND published_at IS NULL AND id IN (SELECT value FROM json_each(:ids))
RETURNING id;

-- name: outbox_parked_discard
DELETE FROM outbox_events
WHERE status = 'parked' AND published_at IS NULL AND id IN (SELECT value FROM json_each(:ids))
RETURNING id;

-- name: outbox_replay_list
SELECT id FROM outbox_events
WHERE published_at IS NOT NULL
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:since IS NULL OR published_at >= :since)
  AND (:until IS NULL OR published_at < :until)
ORDER BY id
LIMIT :limit;

-- name: outbox_replay
UPDATE outbox_events
SET published_at = NULL, status = 'pending', attempts = 0,
    available_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE published_at IS NOT NULL AND id IN (SELECT value FROM json_each(:ids))
RETURNING id;
