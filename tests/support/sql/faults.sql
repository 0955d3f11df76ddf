-- Read-back and set-up statements of the fault-injection tests (tests/support/faults.py).
-- Postgres unless a block says otherwise; MariaDB's twins are in mariadb_faults.sql.

-- name: settle_audit_install
-- Every change a relay makes to an outbox row (settle: delete or mark published, record a
-- failure) is logged with who made it (application_name: relays run with PGAPPNAME set to
-- their replica id) and who held the row's shard lease at that moment. The settle statement
-- holds the lease row FOR SHARE, so the owner read here is the one its fence checked.
CREATE TABLE test_settle_audit (
    row_id bigint NOT NULL,
    shard smallint NOT NULL,
    op text NOT NULL,
    writer text NOT NULL,
    lease_owner text,
    lease_token bigint,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION test_settle_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_settle_audit (row_id, shard, op, writer, lease_owner, lease_token)
    SELECT OLD.id, OLD.shard, TG_OP, current_setting('application_name'), l.owner, l.token
    FROM (SELECT 1) AS one
    LEFT JOIN outbox_relay_leases l ON l.shard = OLD.shard;
    RETURN NULL;
END
$$;
CREATE TRIGGER test_settle_audit AFTER UPDATE OR DELETE ON outbox_events
FOR EACH ROW EXECUTE FUNCTION test_settle_audit();

-- name: settle_audit_violations
-- Rows changed by a process that did not hold the shard's lease when it changed them.
SELECT row_id, shard, op, writer, lease_owner, lease_token, at
FROM test_settle_audit
WHERE lease_owner IS DISTINCT FROM writer
ORDER BY at;

-- name: settle_audit_by_writer
SELECT writer, count(*) FROM test_settle_audit GROUP BY writer ORDER BY writer;

-- name: lease_live
SELECT shard, owner, token, lease_until > now() FROM outbox_relay_leases ORDER BY shard;

-- name: event_row_ids
SELECT id, event_id::text, key FROM outbox_events WHERE event_id = ANY(%(ids)s::uuid[]);

-- name: oldest_unpublished_age_s
-- Age of the oldest committed row still waiting (pending, unpublished), 0 when none.
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM outbox_events WHERE published_at IS NULL AND status = 'pending';

-- name: public_table_count
SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public';

-- name: replica_owners
-- Valid in both dialects.
SELECT owner FROM outbox_relay_replicas ORDER BY owner;

-- name: lease_count
-- Valid in both dialects.
SELECT count(*) FROM outbox_relay_leases;

-- name: rows_touched
-- Valid in both dialects: rows a relay has changed in any way.
SELECT count(*) FROM outbox_events
WHERE attempts > 0 OR status <> 'pending' OR published_at IS NOT NULL OR last_error IS NOT NULL;

-- name: row_states
-- Postgres: the rows retention=keep moved into outbox_published are published.
SELECT id, key, status, attempts, published_at IS NOT NULL, coalesce(last_error, '')
FROM outbox_events
UNION ALL
SELECT id, key, 'pending', attempts, true, coalesce(last_error, '') FROM outbox_published
ORDER BY 1;

-- name: published_partition_bounds
-- The partitions of outbox_published the relays made (seconds since the epoch), oldest
-- first; the DEFAULT one is left out.
SELECT m[1]::bigint, m[2]::bigint
FROM (SELECT regexp_match(c.relname, '^outbox_published_p([0-9]+)_([0-9]+)$') AS m
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'outbox_published'::regclass) AS p
WHERE m IS NOT NULL
ORDER BY 1;
