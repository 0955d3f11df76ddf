-- Relay membership, MariaDB dialect.

-- name: replica_heartbeat
INSERT INTO outbox_relay_replicas (owner, seen_until)
VALUES (%(owner)s, TIMESTAMPADD(MICROSECOND, ROUND(%(ttl_s)s * 1000000), NOW(6)))
ON DUPLICATE KEY UPDATE seen_until = VALUES(seen_until);

-- name: replica_list_live
SELECT owner FROM outbox_relay_replicas WHERE seen_until > NOW(6) ORDER BY owner;

-- name: replica_roster
-- The live replicas and whether each holds a live lease (see the Postgres dialect).
SELECT r.owner,
       EXISTS (SELECT 1 FROM outbox_relay_leases l
               WHERE l.owner = r.owner AND l.lease_until > NOW(6)) AS holds
FROM outbox_relay_replicas r
WHERE r.seen_until > NOW(6)
ORDER BY r.owner;

-- name: replica_remove
DELETE FROM outbox_relay_replicas WHERE owner = %(owner)s;

-- name: replica_purge_dead
DELETE FROM outbox_relay_replicas WHERE seen_until < NOW(6) - INTERVAL 1 HOUR;
