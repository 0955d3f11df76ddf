-- Relay membership, Postgres dialect: how replicas find each other.

-- name: replica_heartbeat
INSERT INTO outbox_relay_replicas (owner, seen_until)
VALUES (%(owner)s, now() + %(ttl_s)s * interval '1 second')
ON CONFLICT (owner) DO UPDATE SET seen_until = EXCLUDED.seen_until;

-- name: replica_list_live
SELECT owner FROM outbox_relay_replicas WHERE seen_until > now() ORDER BY owner;

-- name: replica_remove
DELETE FROM outbox_relay_replicas WHERE owner = %(owner)s;

-- name: replica_purge_dead
DELETE FROM outbox_relay_replicas WHERE seen_until < now() - interval '1 hour';
