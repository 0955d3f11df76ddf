-- MariaDB's twins of faults.sql's blocks (tests/support/faults.py); a block not here is
-- faults.sql's, valid in both dialects. Times compare on UTC_TIMESTAMP(6): the columns hold
-- UTC, and a test's connection runs in the server's zone.

-- The settle audit, as on Postgres: every change a relay makes to an outbox row, with who
-- made it and who held the row's shard lease at that moment. The relay's sessions carry
-- their replica id in @outbox_replica_id (session_init_relay); the settle holds the
-- lease row in share mode (lease_check) until it commits, so the owner a trigger reads is
-- the one its fence checked. One trigger per event: a MariaDB trigger has one. The
-- settle_audit_install_* blocks run in this order.

-- name: settle_audit_install_table
CREATE TABLE test_settle_audit (
    row_id bigint NOT NULL,
    shard smallint NOT NULL,
    op varchar(6) NOT NULL,
    writer varchar(200),
    lease_owner varchar(200),
    lease_token bigint,
    at datetime(6) NOT NULL
);

-- name: settle_audit_install_on_update
CREATE TRIGGER test_settle_audit_update AFTER UPDATE ON outbox_events FOR EACH ROW
INSERT INTO test_settle_audit (row_id, shard, op, writer, lease_owner, lease_token, at)
SELECT OLD.id, OLD.shard, 'UPDATE', @outbox_replica_id, l.owner, l.token, SYSDATE(6)
FROM (SELECT 1) AS one
LEFT JOIN outbox_relay_leases l ON l.shard = OLD.shard;

-- name: settle_audit_install_on_delete
CREATE TRIGGER test_settle_audit_delete AFTER DELETE ON outbox_events FOR EACH ROW
INSERT INTO test_settle_audit (row_id, shard, op, writer, lease_owner, lease_token, at)
SELECT OLD.id, OLD.shard, 'DELETE', @outbox_replica_id, l.owner, l.token, SYSDATE(6)
FROM (SELECT 1) AS one
LEFT JOIN outbox_relay_leases l ON l.shard = OLD.shard;

-- name: settle_audit_violations
SELECT row_id, shard, op, writer, lease_owner, lease_token, at
FROM test_settle_audit
WHERE NOT (lease_owner <=> writer)
ORDER BY at;

-- name: lease_live
SELECT shard, owner, token, lease_until > UTC_TIMESTAMP(6) FROM outbox_relay_leases
ORDER BY shard;

-- name: event_row_ids
-- ids: a tuple of event ids (PyMySQL renders it as a parenthesised list).
SELECT id, event_id, `key` FROM outbox_events WHERE event_id IN %(ids)s;

-- name: oldest_unpublished_age_s
SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, min(created_at), UTC_TIMESTAMP(6)) / 1e6, 0)
FROM outbox_events WHERE published_at IS NULL AND status = 'pending';

-- name: row_states
SELECT id, `key`, status, attempts, published_at IS NOT NULL, COALESCE(last_error, '')
FROM outbox_events
UNION ALL
SELECT id, `key`, 'pending', attempts, 1, COALESCE(last_error, '') FROM outbox_published
ORDER BY 1;

-- name: published_oldest_age_s
-- Seconds since the oldest row kept in outbox_published was published (NULL when none).
SELECT TIMESTAMPDIFF(MICROSECOND, min(published_at), UTC_TIMESTAMP(6)) / 1e6
FROM outbox_published;
