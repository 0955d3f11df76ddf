-- Statements of bench/tenant_fairness.py.

-- name: backlog_load
-- A slice [first, last] of tenant A's backlog in one statement, in seq order (so ids
-- follow seq): OrderPlaced events over the given keys, each on the shard producer_lib
-- gives its key (computed by the caller), about 300 bytes of JSON carrying its seq.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers, tenant)
SELECT gen_random_uuid(), %(topic)s, k.key, k.shard, 'OrderPlaced',
       convert_to(json_build_object(
           'seq', n, 'order_id', n, 'customer_id', k.key,
           'amount_cents', 100 + mod(n * 7919, 20000), 'currency', 'EUR',
           'items', json_build_array(json_build_object(
               'sku', 'SKU-' || lpad(mod(n * 104729, 1000000)::text, 6, '0'),
               'quantity', 1 + mod(n, 5), 'unit_price_cents', 100 + mod(n, 20000))),
           'shipping', json_build_object('method', 'standard', 'country', 'DE',
                                         'postcode', '10115'),
           'placed_at', '2024-11-29T10:51:00+00:00')::text, 'UTF8'),
       '{"content-type": "application/json"}'::jsonb, %(tenant)s
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n
JOIN unnest(%(keys)s::text[], %(shards)s::smallint[]) WITH ORDINALITY AS k(key, shard, i)
  ON k.i = mod(n, %(key_count)s) + 1
ORDER BY n;

-- name: outbox_vacuum_analyze
VACUUM ANALYZE outbox_events;

-- name: server_checkpoint
CHECKPOINT;
