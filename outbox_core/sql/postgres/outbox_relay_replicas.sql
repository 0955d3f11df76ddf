-- Relay membership, Postgres dialect: how replicas find each other.

-- name: replica_heartbeat
INSERT INTO outbox_relay_replicas (owner, seen_until)
VALUES (%(owner)s, now() + %(ttl_s)s * interval '1 second')
ON CONFLICT (owner) DO UPDATE SET seen_until = EXCLUDED.seen_until;

-- name: replica_list_live
SELECT owner FROM outbox_relay_replicas WHERE seen_until > now() ORDER BY owner;

-- name: replica_roster
-- The live replicas and whether each holds a live lease: the heartbeat picks the active
-- replicas (active_replicas) holders first, so a replica joining never moves shards
-- away from one already working them.
SELECT r.owner,
       EXISTS (SELECT 1 FROM outbox_relay_leases l
               WHERE l.owner = r.owner AND l.lease_until > now()) AS holds
FROM outbox_relay_replicas r
WHERE r.seen_until > now()
ORDER BY r.owner;

-- name: replica_remove
DELETE FROM outbox_relay_replicas WHERE owner = %(owner)s;

-- name: replica_purge_dead
DELETE FROM outbox_relay_replicas WHERE seen_until < now() - interval '1 hour';
