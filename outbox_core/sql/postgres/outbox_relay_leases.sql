-- Shard leases with fencing tokens, Postgres dialect. Every time comes from the
-- database clock (now()), never from a relay's clock.

-- name: lease_acquire
-- Takes a shard that is free (released) or whose lease expired; the token grows by one
-- on every takeover, so writes of any earlier holder are refused. Returns the token, or
-- no row when someone else holds a live lease.
-- fence: the row locked FOR UPDATE first, the one strength that waits for a settle in
-- progress (it holds the row FOR KEY SHARE): the new holder's first claim cannot run
-- while the old holder is still writing that shard's rows. ON CONFLICT's own lock would
-- not wait (owner, token and lease_until are no key columns: FOR NO KEY UPDATE).
WITH fence AS (
    SELECT shard FROM outbox_relay_leases WHERE shard = %(shard)s FOR UPDATE
)
INSERT INTO outbox_relay_leases (shard, owner, token, lease_until)
SELECT %(shard)s, %(owner)s, 1, now() + %(ttl_s)s * interval '1 second'
FROM (SELECT count(*) FROM fence) AS locked
ON CONFLICT (shard) DO UPDATE
SET owner = EXCLUDED.owner,
    token = outbox_relay_leases.token + 1,
    lease_until = EXCLUDED.lease_until
WHERE outbox_relay_leases.owner IS NULL
   OR outbox_relay_leases.lease_until < now()
RETURNING token;

-- name: lease_renew
-- Extends the leases we still hold with the token we hold them by; an expired lease is
-- not renewed (someone may be taking it over): its shard is dropped and re-acquired.
UPDATE outbox_relay_leases l
SET lease_until = now() + %(ttl_s)s * interval '1 second'
FROM unnest(%(shards)s::smallint[], %(tokens)s::bigint[]) AS h(shard, token)
WHERE l.shard = h.shard AND l.token = h.token AND l.owner = %(owner)s
  AND l.lease_until >= now()
RETURNING l.shard;

-- name: lease_release
UPDATE outbox_relay_leases
SET owner = NULL, lease_until = '-infinity'
WHERE shard = %(shard)s AND owner = %(owner)s AND token = %(token)s;

-- name: lease_list
SELECT shard, owner, token, lease_until > now() FROM outbox_relay_leases ORDER BY shard;
