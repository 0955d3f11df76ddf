-- Statements of bench/pg_fetch_waits.py.

-- name: claim_shaped_rows
-- %(rows)s rows shaped as outbox_claim_batch returns them: id, shard, event_id, topic,
-- key, event_type, a 330-byte payload, headers, attempts, created_at, tenant.
SELECT n::bigint, mod(n, 16)::smallint, gen_random_uuid()::text, 'orders',
       'customer-' || lpad(mod(n, 1000)::text, 4, '0'), 'OrderPlaced',
       convert_to(repeat('x', 330), 'UTF8'), '{}', 0, now(), NULL::text
FROM generate_series(1, %(rows)s::bigint) AS n;

-- name: claim_shaped_arrays
-- The same rows as one row of eleven arrays: the server builds the whole result before it
-- sends it, so the client reads it in a few large reads instead of hundreds of small ones.
SELECT array_agg(id), array_agg(shard), array_agg(event_id), array_agg(topic), array_agg(key),
       array_agg(event_type), array_agg(payload), array_agg(headers), array_agg(attempts),
       array_agg(created_at), array_agg(tenant)
FROM (
    SELECT n::bigint AS id, mod(n, 16)::smallint AS shard, gen_random_uuid()::text AS event_id,
           'orders' AS topic, 'customer-' || lpad(mod(n, 1000)::text, 4, '0') AS key,
           'OrderPlaced' AS event_type, convert_to(repeat('x', 330), 'UTF8') AS payload,
           '{}' AS headers, 0 AS attempts, now() AS created_at, NULL::text AS tenant
    FROM generate_series(1, %(rows)s::bigint) AS n
) AS c;

-- name: backend_pid
SELECT pg_backend_pid();
