-- Relay membership, SQLite dialect.

-- name: replica_heartbeat
INSERT INTO outbox_relay_replicas (owner, seen_until)
VALUES (:owner, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || :ttl_s || ' seconds'))
ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until;

-- name: replica_list_live
SELECT owner FROM outbox_relay_replicas WHERE seen_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ORDER BY owner;

-- name: replica_roster
-- The live replicas and whether each holds a live lease (see the Postgres dialect).
SELECT r.owner,
       EXISTS (SELECT 1 FROM outbox_relay_leases l
               WHERE l.owner = r.owner
                 AND l.lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) AS holds
FROM outbox_relay_replicas r
WHERE r.seen_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ORDER BY r.owner;

-- name: replica_remove
DELETE FROM outbox_relay_replicas WHERE owner = :owner;

-- name: replica_purge_dead
DELETE FROM outbox_relay_replicas
WHERE seen_until < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-3600 seconds');
