-- Queries on outbox_published, Postgres dialect: the published rows retention=keep keeps,
-- partitioned by publish time (migrations/postgres/0005_published_history.sql).

-- name: outbox_published_exists
-- Whether migration 0005 (or its Alembic operations) made the table yet.
SELECT to_regclass('outbox_published') IS NOT NULL;

-- name: outbox_published_default_create
-- The partition every row no other partition covers goes to, so a settle never fails for
-- want of a partition. The migration creates it; a schema made from outbox_core.tables
-- (Alembic) gets it from `outbox-relay migrate`, which runs this after the migrations.
CREATE TABLE IF NOT EXISTS outbox_published_default PARTITION OF outbox_published DEFAULT;

-- name: outbox_published_rotate_install
-- The partition maintenance, run by the relay's purge round (relay/control/purge.py):
-- drops every partition whose upper bound is at or before now() - retention_s, then
-- creates partitions of width_s seconds until they cover now() + ahead_s, each starting at
-- the previous one's upper bound (a change of width never overlaps). Partition names are
-- outbox_published_p<from>_<to>, seconds since the epoch: built from numbers here, never
-- from input, and read back only when they match that pattern.
-- SECURITY DEFINER: creating and dropping partitions needs the table's owner; the relay's
-- role gets EXECUTE on this function only (grants.sql), never DDL. search_path is the one
-- `outbox-relay migrate` ran with, and a temporary table of the same name is refused.
-- Each DDL needs ACCESS EXCLUSIVE on the parent, which every settle writing into it holds
-- in ROW EXCLUSIVE. It takes that lock NOWAIT: a DDL waiting in the lock queue would hold
-- every later settle behind it for as long as it waited (a settle of a draining backlog
-- runs for 100 ms and more), so one that cannot have the lock at once is skipped, and the
-- caller tries again (relay/control/purge.py). Settles then wait only while a DDL runs.
-- lock_timeout_ms bounds the waits for any other lock (the DEFAULT partition's, which a
-- new partition's bounds are checked against). Where a new partition starts: below, at
-- lower_s. Rows land in the DEFAULT partition only when no partition covers their time
-- (no relay for longer than ahead_s); the purge deletes them in batches.
-- Returns (created, dropped, skipped).
CREATE OR REPLACE FUNCTION outbox_published_rotate(
    retention_s float8, width_s bigint, ahead_s bigint, lock_timeout_ms integer
) RETURNS TABLE (created integer, dropped integer, skipped integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $rotate$
DECLARE
    part record;
    now_s float8 := extract(epoch FROM now());
    top bigint;
    lower_s bigint;
    upper_s bigint;
BEGIN
    created := 0;
    dropped := 0;
    skipped := 0;
    IF retention_s IS NULL OR NOT retention_s >= 0 OR retention_s = 'Infinity'::float8
       OR width_s IS NULL OR width_s < 1 OR ahead_s IS NULL OR ahead_s < 0
       OR ahead_s / width_s > 64 OR lock_timeout_ms IS NULL OR lock_timeout_ms < 1 THEN
        RAISE EXCEPTION 'outbox_published_rotate: bad arguments' USING ERRCODE = '22023';
    END IF;
    IF (SELECT c.relpersistence FROM pg_class c
        WHERE c.oid = 'outbox_published'::regclass) = 't' THEN
        RAISE EXCEPTION 'outbox_published_rotate: outbox_published resolves to a temporary table'
            USING ERRCODE = '42501';
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
    FOR part IN
        SELECT c.relname,
               (regexp_match(c.relname, '^outbox_published_p[0-9]+_([0-9]+)$'))[1]::bigint AS upper_s
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'outbox_published'::regclass
          AND c.relname ~ '^outbox_published_p[0-9]+_[0-9]+$'
        ORDER BY 2
    LOOP
        IF part.upper_s <= now_s - retention_s THEN
            BEGIN
                LOCK TABLE outbox_published IN ACCESS EXCLUSIVE MODE NOWAIT;
                EXECUTE 'DROP TABLE ' || quote_ident(part.relname);
                dropped := dropped + 1;
            EXCEPTION WHEN lock_not_available THEN
                skipped := skipped + 1;
            WHEN undefined_table THEN
                -- Another replica's rotation dropped it while this one waited for it.
                NULL;
            END;
        ELSE
            top := greatest(top, part.upper_s);
        END IF;
    END LOOP;
    -- Contiguous with the newest partition, or, when none is left or the newest ended a
    -- while ago, from a little before now: a settle's rows carry its transaction's start,
    -- and one in flight goes into the new partition rather than the DEFAULT one. Never
    -- over a row the DEFAULT partition holds (Postgres checks every one of them under
    -- the lock, so an empty DEFAULT partition is also what keeps each DDL short).
    lower_s := greatest(top, floor(now_s)::bigint - least(width_s, 60));
    IF lower_s >= now_s + ahead_s + width_s THEN
        RETURN NEXT;  -- covered: no lock taken, nothing read
        RETURN;
    END IF;
    BEGIN
        -- Before the DEFAULT partition is read: another replica's DDL holds it meanwhile.
        LOCK TABLE outbox_published IN ACCESS EXCLUSIVE MODE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        skipped := skipped + 1;
        RETURN NEXT;
        RETURN;
    END;
    lower_s := greatest(
        lower_s,
        floor(extract(epoch FROM (SELECT max(d.published_at)
                                  FROM outbox_published_default d)))::bigint + 1);
    WHILE lower_s < now_s + ahead_s + width_s LOOP
        upper_s := lower_s + width_s;
        BEGIN
            EXECUTE 'CREATE TABLE ' || quote_ident('outbox_published_p' || lower_s || '_' || upper_s)
                || ' PARTITION OF outbox_published FOR VALUES FROM ('
                || quote_literal(to_timestamp(lower_s)) || ') TO ('
                || quote_literal(to_timestamp(upper_s)) || ')';
            created := created + 1;
        EXCEPTION WHEN lock_not_available OR check_violation THEN
            -- check_violation: the DEFAULT partition already holds a row of that range.
            skipped := skipped + 1;
            EXIT;
        WHEN duplicate_table OR unique_violation THEN
            -- Another replica's rotation made it after this one read the partitions
            -- (unique_violation: both wrote the catalog at once).
            NULL;
        END;
        lower_s := upper_s;
    END LOOP;
    RETURN NEXT;
END
$rotate$;

-- name: outbox_published_rotate_revoke
-- Functions are executable by PUBLIC unless revoked; grants.sql gives it to the relay.
REVOKE EXECUTE ON FUNCTION outbox_published_rotate(float8, bigint, bigint, integer) FROM PUBLIC;

-- name: outbox_published_rotate
SELECT created, dropped, skipped
FROM outbox_published_rotate(%(retention_s)s::float8, %(width_s)s::bigint, %(ahead_s)s::bigint,
                             %(lock_timeout_ms)s::integer);

-- name: outbox_published_purge
-- Rows of the DEFAULT partition published before the cutoff (rows no partition covered
-- when they were settled), in small batches as the purge of outbox_events. A healthy relay
-- leaves none there: its partitions are made ahead.
DELETE FROM outbox_published_default
WHERE (id, published_at) IN (
    SELECT id, published_at FROM outbox_published_default
    WHERE published_at < now() - %(retention_s)s * interval '1 second'
    ORDER BY published_at
    LIMIT %(limit)s
)
RETURNING 1;
