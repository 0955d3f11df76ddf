-- Statements of bench/pg_fetch_waits.py.

-- name: claim_shaped_rows
-- %(rows)s rows shaped as outbox_claim_batch returns them: id, shard, event_id, topic,
-- key, event_type, a 330-byte payload, headers, attempts, created_at, tenant.
SELECT n::bigint, mod(n, 16)::smallint, gen_random_uuid()::text, 'orders',
       'customer-' || lpad(mod(n, 1000)::text, 4, '0'), 'OrderPlaced',
       convert_to(repeat('x', 330), 'UTF8'), '{}', 0, now(), NULL::text
FROM generate_series(1, %(rows)s::bigint) AS n;
