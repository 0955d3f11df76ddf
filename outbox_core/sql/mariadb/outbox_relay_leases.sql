-- Shard leases with fencing tokens, MariaDB dialect. Every time comes from the database
-- clock (NOW(6), UTC), never from a relay's clock. A released lease has no owner and the
-- column's ancient default as lease_until, so "free" is one comparison: lease_until < NOW(6).
-- There is no UPDATE ... RETURNING: a lease write is followed, in the same transaction, by
-- its _result read.

-- fragment: free
lease_until < NOW(6)

-- name: lease_acquire
-- Takes a shard that is free (released) or whose lease expired; the token grows by one on
-- every takeover. The duplicate row is locked exclusively, so a takeover waits for a
-- settle in progress (it holds the row in share mode: lease_check). Assignments run left
-- to right, each seeing the ones before: lease_until, which the others test, goes last.
INSERT INTO outbox_relay_leases (shard, owner, token, lease_until)
VALUES (%(shard)s, %(owner)s, 1, TIMESTAMPADD(MICROSECOND, ROUND(%(ttl_s)s * 1000000), NOW(6)))
ON DUPLICATE KEY UPDATE
    token = IF({{free}}, token + 1, token),
    owner = IF({{free}}, VALUES(owner), owner),
    lease_until = IF({{free}}, VALUES(lease_until), lease_until);

-- name: lease_acquire_result
-- The token, if the statement before took the lease: ROW_COUNT() is 1 for a new row, 2 for
-- a takeover, 0 when the row stayed as it was (someone holds a live lease). The drivers'
-- connections do not set CLIENT_FOUND_ROWS, under which an unchanged row would count 1.
SELECT token FROM outbox_relay_leases WHERE shard = %(shard)s AND ROW_COUNT() > 0;

-- fragment: held_pairs
(shard, token) IN (
    SELECT s.shard, t.token
    FROM JSON_TABLE(%(shards)s, '$[*]' COLUMNS (i FOR ORDINALITY, shard smallint PATH '$')) AS s
    JOIN JSON_TABLE(%(tokens)s, '$[*]' COLUMNS (i FOR ORDINALITY, token bigint PATH '$')) AS t
      ON t.i = s.i
)

-- name: lease_renew
-- Extends the leases we still hold with the token we hold them by; an expired lease is
-- not renewed (someone may be taking it over).
UPDATE outbox_relay_leases
SET lease_until = TIMESTAMPADD(MICROSECOND, ROUND(%(ttl_s)s * 1000000), NOW(6))
WHERE owner = %(owner)s AND lease_until >= NOW(6) AND {{held_pairs}};

-- name: lease_renew_result
-- The leases the statement before renewed: it locked them, and left them in the future;
-- those it did not renew had expired, or belong to someone else.
SELECT shard FROM outbox_relay_leases
WHERE owner = %(owner)s AND lease_until >= NOW(6) AND {{held_pairs}};

-- name: lease_release
UPDATE outbox_relay_leases
SET owner = NULL, lease_until = DEFAULT(lease_until)
WHERE shard = %(shard)s AND owner = %(owner)s AND token = %(token)s;

-- name: lease_check
-- The settle's fence, in its transaction: of the shards (paired with tokens by position),
-- those whose lease row still carries our token; every row locked in share mode until the
-- settle commits, so a takeover (lease_acquire's exclusive lock) waits for it. The array
-- is read first (STRAIGHT_JOIN), in its order, and each lease row by primary key
-- (eq_ref, no join buffer): the caller sends the shards ascending, so the rows are locked
-- in ascending shard order, the order lease_renew's scan locks them in (decision 28).
SELECT l.shard
FROM JSON_TABLE(%(shards)s, '$[*]' COLUMNS (i FOR ORDINALITY, shard smallint PATH '$')) AS s
STRAIGHT_JOIN outbox_relay_leases AS l ON l.shard = s.shard
WHERE l.owner = %(owner)s
  AND l.token = JSON_VALUE(%(tokens)s, CONCAT('$[', s.i - 1, ']'))
LOCK IN SHARE MODE;

-- name: lease_list
SELECT shard, owner, token, lease_until > NOW(6) FROM outbox_relay_leases ORDER BY shard;
