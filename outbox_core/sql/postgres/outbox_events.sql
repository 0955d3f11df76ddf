-- Queries on outbox_events, Postgres dialect (psycopg named parameters).

-- name: outbox_insert
-- One event, with neither per-key lock nor notify hint (the cheapest form).
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at,
                           tenant)
VALUES (%(event_id)s, %(topic)s, %(key)s, %(shard)s, %(event_type)s, %(payload)s,
        %(headers)s::jsonb,
        COALESCE(%(available_at)s::timestamptz, now() + %(delay_s)s * interval '1 second'),
        %(tenant)s);

-- name: outbox_insert_locked
-- One event. lock_key NULL skips the per-key lock: pg_advisory_xact_lock is strict, so
-- a NULL argument returns NULL without locking. The lock is taken in the FROM subquery,
-- before the row's identity value is drawn, so ids of one key follow commit order.
-- notify_channel NULL sends no hint; otherwise Postgres folds the identical
-- (channel, shard) notifications of one transaction into one, delivered at commit.
-- The casts: a SELECT list gives its parameters no column types to infer, and asyncpg
-- binds each parameter by the type the server infers.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at,
                           tenant)
SELECT %(event_id)s::uuid, %(topic)s::text, %(key)s::text, %(shard)s::smallint,
       %(event_type)s::text, %(payload)s::bytea, %(headers)s::jsonb,
       COALESCE(%(available_at)s::timestamptz, now() + %(delay_s)s * interval '1 second'),
       %(tenant)s::text
FROM (
    SELECT pg_advisory_xact_lock(%(lock_ns)s::int, %(lock_key)s::int),
           (SELECT count(pg_notify(ch, %(shard)s::smallint::text))
            FROM (SELECT %(notify_channel)s::text AS ch) AS c WHERE ch IS NOT NULL)
) AS per_key_lock;

-- name: outbox_insert_batch
-- Many events in one round trip. Locks are taken first, in sorted order so that two
-- batches never deadlock; ORDER BY ord makes identity values follow the caller's order
-- (volatile target-list expressions are evaluated after the sort).
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, available_at,
                           tenant)
SELECT e.event_id, e.topic, e.key, e.shard, e.event_type, e.payload, e.headers::jsonb,
       COALESCE(e.available_at, now() + e.delay_s * interval '1 second'), e.tenant
FROM (
    SELECT count(pg_advisory_xact_lock(%(lock_ns)s::int, k)) AS locked
    FROM (SELECT DISTINCT unnest(%(lock_keys)s::int[]) AS k ORDER BY 1) AS keys
) AS per_key_locks,
(
    SELECT count(pg_notify(ch, s::text)) AS hinted
    FROM (SELECT DISTINCT unnest(%(shards)s::smallint[]) AS s) AS shards,
         (SELECT %(notify_channel)s::text AS ch) AS c
    WHERE ch IS NOT NULL
) AS hints,
unnest(
    %(event_ids)s::uuid[], %(topics)s::text[], %(keys)s::text[], %(shards)s::smallint[],
    %(event_types)s::text[], %(payloads)s::bytea[], %(headers)s::text[],
    %(available_ats)s::timestamptz[], %(delays_s)s::float8[], %(tenants)s::text[]
) WITH ORDINALITY AS e(event_id, topic, key, shard, event_type, payload, headers,
                       available_at, delay_s, tenant, ord)
ORDER BY e.ord;

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;

-- fragment: claim_columns
-- What every claim returns, named as relay.store.ClaimedRow's fields (rows are read by
-- name). Payload and headers are passed through as bytes and text, and the event id as
-- text: the relay never decodes them, and decoding jsonb and uuid costs most of a read.
e.id, e.shard::int AS shard, e.event_id::text AS event_id, e.topic, e.key, e.event_type,
e.payload, e.headers::text AS headers_json, e.attempts,
extract(epoch FROM e.created_at)::float8 AS created_at, e.tenant

-- fragment: claim_names
-- claim_columns by name, over a claim's rows w.
w.id, w.shard, w.event_id, w.topic, w.key, w.event_type, w.payload, w.headers_json, w.attempts,
w.created_at, w.tenant

-- fragment: shard_bytes(order)
-- The byte budget, per shard: the payload bytes of the shard's rows up to and with this
-- one, in id order (with shard_rows). octet_length reads the stored length, never the
-- value: a row the budget leaves out is never detoasted, nor sent.
octet_length(e.payload) AS size,
sum(octet_length(e.payload)) OVER ({{order}} ROWS UNBOUNDED PRECEDING) AS upto

-- fragment: by_id
ORDER BY e.id

-- fragment: shard_by_id
PARTITION BY e.shard ORDER BY e.id

-- fragment: shard_rows
-- A shard's rows while their bytes stay within shard_bytes (the relay's claim_max_bytes,
-- shared between the shards claimed), so a claim holds about claim_max_bytes at most.
-- The first row of the first shard of the array goes whatever its size, so an event
-- larger than a shard's share is never stuck: the relay rotates the array every cycle.
-- A prefix of each shard's rows in id order: no row of a key goes past an earlier one
-- left out.
(w.upto <= %(shard_bytes)s::bigint OR (w.upto = w.size AND w.shard = (%(shards)s::smallint[])[1]))

-- fragment: not_held
-- Keys whose failure the settle in flight is still recording (relay/pipeline/ordering.py):
-- their rows could not go out in this cycle, so they are not read.
AND e.key <> ALL(%(held_keys)s::text[])

-- fragment: claim_clock
-- The one moment a claim calls now, read after its snapshot was taken (a CTE is computed
-- when first read, once). now() would be the start of the claim's transaction, and a
-- row's available_at is the start of its writer's (now() + delay_s): a writer that began
-- after the claim's transaction and committed before its snapshot left a visible row
-- that looked not yet due, so the claim took a later row of its key, due and committed
-- after it, first. Behind a transaction pooler the claim's transaction begins a round
-- trip before its statement; directly it begins as the statement is received, before it
-- is planned. Every committed row the snapshot sees began before this moment.
claim_clock AS MATERIALIZED (SELECT clock_timestamp() AS t)

-- fragment: claim_now
(SELECT t FROM claim_clock)

-- fragment: claimable
-- A row of the claim's shard that may go out now, its key's order aside. Status-based:
-- never an id cursor, which would skip rows whose transactions commit out of id order.
-- in_flight: ids of the previous cycle, sent and acked but not settled yet (the cycle
-- claims again while that settle runs); a hashed subplan, so each row costs one lookup.
e.published_at IS NULL
AND e.status = 'pending'
-- The first comparison is implied by the second (now() is never after the claim's clock);
-- it is the one the planner can estimate (now() is known when it plans, the clock is
-- not), so it still expects nearly every row due and walks (shard, id) in id order.
AND (e.available_at <= now() OR e.available_at <= {{claim_now}})
AND e.id NOT IN (SELECT unnest(%(in_flight)s::bigint[]))

-- fragment: key_not_blocked
-- block_key policy: a row waits while an earlier row of its key is parked or backing off
-- after a failure. Delayed rows (attempts = 0) do not block their key. The skip policy
-- fills this slot with nothing: failed and parked rows hold nothing back.
AND NOT EXISTS (
    SELECT 1 FROM outbox_events b
    WHERE b.shard = e.shard AND b.key = e.key AND b.id < e.id
      AND b.published_at IS NULL
      -- Implied by the next line; written out because it is the predicate of the
      -- partial index outbox_events_blocking_idx, which the planner uses only when
      -- a query states it.
      AND (b.status = 'parked' OR b.attempts > 0)
      AND (b.status = 'parked' OR (b.attempts > 0 AND b.available_at > {{claim_now}}))
)

-- fragment: one_tenant
-- A lane claiming for one tenant ('' names the untenanted rows).
AND coalesce(e.tenant, '') = %(tenant)s

-- fragment: claim_shards
-- The shards of a claim, each with its claim floor (relay/control/floors.py): every row
-- of the shard with an id at or below it is published, so the walk of the shard's
-- unpublished rows starts above it. An old snapshot keeps the index entries of published
-- rows from vacuum; without the floor every claim stepped over all of them.
unnest(%(shards)s::smallint[], %(floors)s::bigint[]) AS s(shard, floor)

-- fragment: above_floor
-- Twice: `e.id > s.floor` is where the walk of outbox_events_unpublished_idx (shard, id)
-- starts; alone, it let the planner walk the primary key from the floor over every
-- shard's rows instead. The row comparison is a condition no index but (shard, id) ones
-- can take, which keeps the plan on the unpublished rows.
AND e.id > s.floor
AND (e.shard, e.id) > (s.shard, s.floor)

-- fragment: claim_per_shard(tenant, rule)
-- The next rows of each given shard, up to limit per shard, each shard's rows in id
-- order: one statement claims for every shard a relay holds (one index walk per shard,
-- stopping after limit rows).
WITH {{claim_clock}}
SELECT c.* FROM {{claim_shards}}
CROSS JOIN LATERAL (
    SELECT {{claim_names}} FROM (
        SELECT {{claim_columns}}, {{shard_bytes(order=by_id)}}
        FROM outbox_events e
        WHERE e.shard = s.shard
          {{above_floor}}
          {{tenant}}
          AND {{claimable}}
          {{not_held}}
          {{rule}}
        ORDER BY e.id
        LIMIT %(limit)s
    ) AS w
    WHERE {{shard_rows}}
) AS c

-- fragment: tenant_probe(below)
-- One step of the fair claim's skip scan over the tenants of shard t.shard: the greatest
-- tenant with an unpublished row above the floor, under t.below when `below` says so.
-- g.skipped: the greatest tenant of the lane's skip list where this probe starts (a
-- tenant the other lane claims). The walk stops at the end of its entries and never goes
-- through them: once that tenant has drained, its entries above the floor point at rows
-- just published, which no scan may mark passed while an older snapshot is open, so each
-- probe through them visited the table for every one. Two branches, one of them empty:
-- the stop is a bound of its own on the tenant, the only kind the backward walk stops at
-- (a row comparison decided past its first column does not stop it), and none when
-- nothing is skipped below.
({{tenant_probe_walk(below=below, stop=nothing_skipped)}})
UNION ALL
({{tenant_probe_walk(below=below, stop=above_skipped)}})

-- fragment: tenant_probe_walk(below, stop)
SELECT coalesce(e.tenant, '') AS tenant FROM outbox_events e
WHERE e.shard = t.shard AND e.published_at IS NULL AND e.id > t.floor
  {{below}}
  {{stop}}
ORDER BY coalesce(e.tenant, '') DESC, e.id DESC
LIMIT 1

-- fragment: under_below
AND coalesce(e.tenant, '') < t.below

-- fragment: nothing_skipped
AND g.skipped IS NULL

-- fragment: above_skipped
AND coalesce(e.tenant, '') > g.skipped

-- fragment: claim_by_turns(rule)
-- fair_tenants: the rows the plain claim would take (its rule, in_flight left out), but
-- which of a shard's rows make its batch is decided by turns between the shard's tenants
-- instead of id order, so a tenant's backlog cannot fill every batch while others wait.
-- tenants: a skip scan of outbox_events_tenant_idx (tenant_probe), one probe per tenant
-- with unpublished rows in the shard (the untenanted rows are the tenant ''), from the
-- top down: `below` is where the next probe starts, a tenant found or, when a probe found
-- none, the skipped tenant it stopped at (NULL ends a shard's walk).
-- It walks backwards, landing on each tenant's newest row: the oldest entries of a
-- draining tenant are the rows just published, not yet vacuumed away, which a forward
-- probe would step over on every claim (the candidates' walk does once, anyway). Once a
-- tenant's backlog has drained, every entry of it is such a row, and each probe past it
-- steps over all of them: `e.id > floor` is checked on the index entry, so those at or
-- below the shard's floor are passed over without a visit to the table (130-230 ms a
-- claim over a drained 500,000-row backlog before, at the end of every large drain).
-- candidates: each tenant's claimable ids, walked in id order through the same index, at
-- most per_tenant (min(tenant_max_rows, limit)) of them; its k-th (from 1) is in turn
-- (k - 1) / weight. chosen: the shard's first `limit` ids by (turn, id). Only ids are
-- ranked, then the chosen rows are read by primary key: ranking whole rows sorted their
-- payloads too, which spilled to disk past work_mem. Returned in id order; a key belongs
-- to one tenant, so this is the order of its rows in its tenant's turns too.
-- only / skip: the tenants of the lane claiming (relay/lanes.py): only NULL takes every
-- tenant but those in skip (which the probes pass over).
WITH RECURSIVE {{claim_clock}},
tenants(shard, floor, tenant, below) AS (
    SELECT t.shard, t.floor, p.tenant, coalesce(p.tenant, g.skipped)
    FROM (SELECT s.shard, s.floor FROM {{claim_shards}}) AS t
    CROSS JOIN LATERAL (SELECT max(k) AS skipped FROM unnest(%(skip)s::text[]) AS k) AS g
    LEFT JOIN LATERAL (
        {{tenant_probe(below=nothing)}}
    ) AS p ON true
    UNION ALL
    SELECT t.shard, t.floor, p.tenant, coalesce(p.tenant, g.skipped)
    FROM tenants t
    CROSS JOIN LATERAL (
        SELECT max(k) AS skipped FROM unnest(%(skip)s::text[]) AS k WHERE k < t.below
    ) AS g
    LEFT JOIN LATERAL (
        {{tenant_probe(below=under_below)}}
    ) AS p ON true
    WHERE t.below IS NOT NULL
),
candidates AS (
    SELECT t.shard, x.id, (x.k - 1) / coalesce(w.weight, 1) AS turn
    FROM tenants t
    LEFT JOIN unnest(%(weight_tenants)s::text[], %(weights)s::int[]) AS w(tenant, weight)
      ON w.tenant = t.tenant
    CROSS JOIN LATERAL unnest(ARRAY(
        SELECT e.id
        FROM outbox_events e
        WHERE e.shard = t.shard
          AND (e.shard, coalesce(e.tenant, ''), e.id) > (t.shard, t.tenant, t.floor)
          AND coalesce(e.tenant, '') = t.tenant
          AND {{claimable}}
          {{not_held}}
          {{rule}}
        ORDER BY e.id
        LIMIT %(per_tenant)s
    )) WITH ORDINALITY AS x(id, k)
    WHERE t.tenant IS NOT NULL
      AND (%(only)s::text[] IS NULL OR t.tenant = ANY(%(only)s::text[]))
),
chosen AS (
    SELECT r.id FROM (
        SELECT c.id, row_number() OVER (PARTITION BY c.shard ORDER BY c.turn, c.id) AS place
        FROM candidates c
    ) AS r
    WHERE r.place <= %(limit)s
)
SELECT {{claim_names}} FROM (
    SELECT {{claim_columns}}, {{shard_bytes(order=shard_by_id)}}
    FROM outbox_events e
    WHERE e.id = ANY(ARRAY(SELECT id FROM chosen))
) AS w
WHERE {{shard_rows}}
ORDER BY w.id

-- fragment: delete_acked
DELETE FROM outbox_events e

-- fragment: returned_count
1

-- fragment: returned_history
-- What outbox_published keeps of a row (replay and status need these).
e.id, e.event_id, e.topic, e.key, e.shard, e.event_type, e.payload, e.headers, e.created_at,
e.attempts, e.last_error, e.tenant

-- fragment: acked_in_lease
-- The settle's acked rows, of the shards whose lease still carries our token.
e.id = ANY(%(published_ids)s::bigint[]) AND e.shard IN (SELECT shard FROM lease)

-- fragment: payload_stays
-- retention=keep: a payload larger than move_max_bytes is not copied into the history (a
-- move writes its TOAST chunks and their WAL again, for every byte); its row is marked
-- published where it is, one small row version, and the purge deletes it after the
-- retention. octet_length reads the stored length, never the value.
octet_length(e.payload) > %(move_max_bytes)s::bigint

-- fragment: moved_only
AND NOT {{payload_stays}}

-- fragment: count_deleted
(SELECT count(*) FROM done)

-- fragment: count_kept
(SELECT count(*) FROM done) + (SELECT count(*) FROM marked)

-- fragment: kept_in_history
-- retention=keep: the rows deleted by done go into the history, published now; those with
-- large payloads are marked where they are instead. A data-modifying CTE runs whether or
-- not the statement reads it, in the settle's one transaction: a published row is in
-- outbox_events (marked) or in outbox_published, never in both or neither.
marked AS (
    UPDATE outbox_events e SET published_at = now()
    WHERE {{acked_in_lease}} AND {{payload_stays}}
    RETURNING 1
),
kept AS (
    INSERT INTO outbox_published (id, event_id, topic, key, shard, event_type, payload,
                                  headers, created_at, attempts, last_error, published_at,
                                  tenant)
    SELECT d.id, d.event_id, d.topic, d.key, d.shard, d.event_type, d.payload, d.headers,
           d.created_at, d.attempts, d.last_error, now(), d.tenant
    FROM done d
),

-- fragment: settle(acked, moved, returned, kept, published)
-- One statement settles a cycle over many shards: acked rows are deleted (the acked slot;
-- with retention=keep, kept moves them into outbox_published), failed rows get their
-- attempt, error and next time (or are parked). Each shard's lease row is locked FOR KEY SHARE and must still carry our token:
-- a takeover (lease_acquire locks that row FOR UPDATE) either committed first, and that
-- shard's rows are left alone, or waits for us to commit. KEY SHARE, not SHARE:
-- lease_renew's UPDATE (FOR NO KEY UPDATE strength) goes ahead beside it. With SHARE a
-- renewal waited for a long settle, and every other settle of those shards (the other
-- lane's) queued behind the waiting renewal.
-- Returns (shards still held, settled, failed).
WITH lease AS (
    SELECT l.shard FROM outbox_relay_leases l
    JOIN unnest(%(shards)s::smallint[], %(tokens)s::bigint[]) AS t(shard, token)
      ON l.shard = t.shard AND l.token = t.token
    WHERE l.owner = %(owner)s
    FOR KEY SHARE OF l
),
done AS (
    {{acked}}
    WHERE {{acked_in_lease}}
    {{moved}}
    RETURNING {{returned}}
),
{{kept}}
failed AS (
    UPDATE outbox_events e
    SET attempts = e.attempts + 1,
        last_error = f.error,
        available_at = now() + f.delay_s * interval '1 second',
        status = CASE WHEN f.park THEN 'parked' ELSE 'pending' END
    FROM unnest(%(failed_ids)s::bigint[], %(errors)s::text[], %(delays_s)s::float8[],
                %(parks)s::bool[]) AS f(id, error, delay_s, park)
    WHERE e.id = f.id AND e.shard IN (SELECT shard FROM lease)
    RETURNING 1
)
SELECT coalesce((SELECT array_agg(shard::int) FROM lease), '{}') AS held,
       {{published}} AS published, (SELECT count(*) FROM failed) AS failed

-- name: outbox_settle_delete
-- retention=delete: acked rows are deleted.
{{settle(acked=delete_acked, moved=nothing, returned=returned_count, kept=nothing, published=count_deleted)}};

-- name: outbox_settle_keep
-- retention=keep: acked rows move into outbox_published, where they stay until the purge
-- drops their partition (docs/design.md, "Published rows"). A row leaves outbox_events as
-- with retention=delete: no second row version there, and none in the history. A row
-- whose payload is larger than move_max_bytes is marked published where it is.
{{settle(acked=delete_acked, moved=moved_only, returned=returned_history, kept=kept_in_history, published=count_kept)}};

-- name: outbox_purge_published
-- Retention: removes a small batch of rows published before the cutoff; run repeatedly.
DELETE FROM outbox_events
WHERE id IN (
    SELECT id FROM outbox_events
    WHERE published_at IS NOT NULL
      AND published_at < now() - %(retention_s)s * interval '1 second'
    ORDER BY published_at
    LIMIT %(limit)s
)
RETURNING 1;

-- name: outbox_shard_max
SELECT coalesce(max(shard), -1) FROM outbox_events WHERE published_at IS NULL;

-- name: outbox_backlog
-- For gauges and `status`. The pending count walks only the partial index of unpublished
-- rows, each shard's from its claim floor (so not through the dead entries an old
-- snapshot keeps), and stops at count_limit rows; parked rows are counted through the
-- index of failed rows, up to the same limit. The oldest pending row is found per shard
-- through the unpublished index: exact at any backlog, a probe per shard.
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM {{backlog_rows}} WHERE e.status = 'pending' LIMIT %(count_limit)s) AS c),
    (SELECT count(*) FROM (
        SELECT 1 FROM outbox_events e
        WHERE e.published_at IS NULL AND e.status = 'parked'
        LIMIT %(count_limit)s) AS c),
    (SELECT coalesce(extract(epoch FROM now() - min(o.created_at))::float8, 0)
     FROM outbox_events o
     WHERE o.id IN (
         SELECT (SELECT min(e.id) FROM outbox_events e
                 WHERE e.shard = s.shard {{above_floor}}
                   AND e.published_at IS NULL AND e.status = 'pending')
         FROM {{claim_shards}}
     ));

-- fragment: backlog_rows
-- Each shard's unpublished rows above its floor: below one every row is published, so
-- nothing there is counted, and a walk from the bottom stepped over every dead entry an
-- old snapshot keeps. One walk of the (shard, id) index per shard, as the claim's: as a
-- plain join, once the statistics knew the table (after an ANALYZE), the planner hashed
-- the shards and scanned every shard's entries, the floor a mere filter (134,000 buffers
-- at 200,000 dead rows instead of 48). OFFSET 0 keeps the subquery from being flattened
-- into that join. ORDER BY e.id makes the walk an ordered index scan, which the count's
-- LIMIT stops: otherwise the planner chose bitmap scans, which read every entry of a
-- shard before returning one (11,250 entries read for a limit of 5,000).
{{claim_shards}}
CROSS JOIN LATERAL (
    SELECT e.id, e.tenant, e.status, e.created_at, e.published_at
    FROM outbox_events e
    WHERE e.shard = s.shard {{above_floor}}
      AND e.published_at IS NULL
    ORDER BY e.id
    OFFSET 0
) AS e

-- name: outbox_backlog_by_tenant
{{tenants_by_pending(rows=backlog_rows)}}
SELECT CASE WHEN other THEN NULL ELSE tenant END, other, sum(pending)::bigint,
       extract(epoch FROM now() - min(oldest))::float8
FROM ranked
GROUP BY 1, 2
ORDER BY 2, min(place);

-- name: outbox_parked_list
-- Operator view of parked rows; every filter is optional (NULL = any).
SELECT id, event_id::text, topic, key, event_type, attempts, last_error,
       extract(epoch FROM now() - created_at)::float8 AS age_s
FROM outbox_events
WHERE status = 'parked' AND published_at IS NULL
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(topic)s::text IS NULL OR topic = %(topic)s)
  AND (%(key)s::text IS NULL OR key = %(key)s)
  AND (%(error)s::text IS NULL OR strpos(last_error, %(error)s) > 0)
  AND created_at <= now() - %(min_age_s)s * interval '1 second'
ORDER BY id
LIMIT %(limit)s;

-- name: outbox_parked_retry
-- Back to pending with a fresh set of attempts; last_error stays as history.
UPDATE outbox_events
SET status = 'pending', attempts = 0, available_at = now()
WHERE status = 'parked' AND published_at IS NULL AND id = ANY(%(ids)s::bigint[])
RETURNING id;

-- name: outbox_parked_discard
DELETE FROM outbox_events
WHERE status = 'parked' AND published_at IS NULL AND id = ANY(%(ids)s::bigint[])
RETURNING id;

-- name: outbox_replay_list
-- Retained published rows (retention=keep) chosen by ids or by publish time: those in
-- outbox_published, and those a relay from before migration 0005 left marked published
-- in outbox_events (until the purge removes them).
SELECT id FROM (
    SELECT id, published_at FROM outbox_published
    UNION ALL
    SELECT id, published_at FROM outbox_events WHERE published_at IS NOT NULL
) AS p
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(since)s::timestamptz IS NULL OR published_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR published_at < %(until)s::timestamptz)
ORDER BY id
LIMIT %(limit)s;

-- name: outbox_replay
-- Makes retained rows pending again: the relay publishes them once more, with their
-- original event_id (consumers that applied them skip them). A row of outbox_published
-- moves back into outbox_events under its original id (OVERRIDING SYSTEM VALUE): below
-- the claim floors, where the floors' rescan finds it (relay/control/floors.py). A row
-- marked published by a relay from before migration 0005 is unmarked where it is.
WITH moved AS (
    DELETE FROM outbox_published
    WHERE id = ANY(%(ids)s::bigint[])
    RETURNING id, event_id, topic, key, shard, event_type, payload, headers, created_at,
              tenant
),
restored AS (
    INSERT INTO outbox_events (id, event_id, topic, key, shard, event_type, payload, headers,
                               created_at, available_at, tenant)
    OVERRIDING SYSTEM VALUE
    SELECT id, event_id, topic, key, shard, event_type, payload, headers, created_at, now(),
           tenant
    FROM moved
    RETURNING id
),
unmarked AS (
    UPDATE outbox_events
    SET published_at = NULL, status = 'pending', attempts = 0, available_at = now()
    WHERE published_at IS NOT NULL AND id = ANY(%(ids)s::bigint[])
    RETURNING id
)
SELECT id FROM restored UNION ALL SELECT id FROM unmarked;

-- name: outbox_floor_mark
-- The first half of a claim floor round (relay/control/floors.py): the last id drawn
-- from the sequence, read before the writers are listed. Its cache size must be 1: a
-- session with cached values could draw an id at or below the mark after the writers
-- were listed (the round then never moves a floor).
SELECT pg_sequence_last_value(q.seq) AS last_id, p.seqcache AS cache
FROM (SELECT pg_get_serial_sequence('outbox_events', 'id')::regclass AS seq) AS q
JOIN pg_sequence p ON p.seqrelid = q.seq;

-- name: outbox_floor_writers
-- The transactions that may have drawn an id at or below the mark and not ended: an
-- INSERT locks the table (RowExclusiveLock) before it draws its id and keeps the lock
-- until its transaction ends. Read-only transactions, however old, hold no such lock.
-- Prepared transactions keep theirs (pid NULL, virtualtransaction '-1/xid'). Nor does
-- VACUUM or ANALYZE (ShareUpdateExclusiveLock alone): under an old snapshot autovacuum
-- comes back to the table again and again and each run takes a while, which held the
-- floors still for as long as it ran. A transaction that inserts holds RowExclusiveLock
-- whatever else it holds.
SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}') AS writers
FROM pg_locks l
WHERE l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.relation = 'outbox_events'::regclass
  AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'ShareUpdateExclusiveLock')
  AND l.pid IS DISTINCT FROM pg_backend_pid();

-- name: outbox_floor_writers_left
-- How many of the listed transactions are still open (each holds a lock of its own
-- virtual transaction while it runs).
SELECT count(DISTINCT l.virtualtransaction) AS left_open
FROM pg_locks l
WHERE l.virtualtransaction = ANY(%(writers)s::text[]);

-- name: outbox_floor_lowest
-- Each shard's lowest unpublished id above its floor (NULL: none). Run after the
-- writers of the mark have ended, so its snapshot sees every row at or below the mark.
SELECT s.shard::int AS shard,
       (SELECT min(e.id) FROM outbox_events e
        WHERE e.shard = s.shard AND e.published_at IS NULL AND e.id > s.floor) AS lowest
FROM {{claim_shards}};

-- name: outbox_floor_rescan
-- One slice of the rescan below the floors (relay/control/floors.py): each shard's lowest
-- unpublished id above low and at or below its high (its floor), i.e. a replayed row. The
-- walk crosses only the slice's dead entries, so a sweep of the range spreads their cost
-- over rescan_s instead of one statement of seconds; the row comparisons keep the walk on
-- the (shard, id) index of the unpublished rows, as in above_floor.
SELECT s.shard::int AS shard,
       (SELECT min(e.id) FROM outbox_events e
        WHERE e.shard = s.shard AND e.published_at IS NULL
          AND e.id > %(low)s AND e.id <= s.high
          AND (e.shard, e.id) > (s.shard, %(low)s::bigint)
          AND (e.shard, e.id) <= (s.shard, s.high)) AS lowest
FROM unnest(%(shards)s::smallint[], %(high)s::bigint[]) AS s(shard, high);
