-- Shard leases with fencing tokens, SQLite dialect (database clock; '' = released).

-- name: lease_acquire
INSERT INTO outbox_relay_leases (shard, owner, token, lease_until)
VALUES (:shard, :owner, 1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || :ttl_s || ' seconds'))
ON CONFLICT (shard) DO UPDATE
SET owner = excluded.owner,
    token = outbox_relay_leases.token + 1,
    lease_until = excluded.lease_until
WHERE outbox_relay_leases.owner IS NULL
   OR outbox_relay_leases.lease_until < strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
RETURNING token;

-- fragment: held_pairs
-- shards and tokens: JSON arrays of the same length, paired by position.
(shard, token) IN (
    SELECT s.value, t.value FROM json_each(:shards) AS s JOIN json_each(:tokens) AS t USING (key)
)

-- name: lease_renew
UPDATE outbox_relay_leases
SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || :ttl_s || ' seconds')
WHERE owner = :owner
  AND lease_until >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  AND {{held_pairs}}
RETURNING shard;

-- name: lease_release
UPDATE outbox_relay_leases
SET owner = NULL, lease_until = ''
WHERE shard = :shard AND owner = :owner AND token = :token;

-- name: lease_check
-- The settle's fence: the shards whose lease still carries our token.
SELECT shard FROM outbox_relay_leases WHERE owner = :owner AND {{held_pairs}};

-- name: lease_list
SELECT shard, owner, token, lease_until > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM outbox_relay_leases ORDER BY shard;
