-- SQLite-only read-back queries for tests.

-- name: test_order_insert
INSERT INTO test_orders (id, customer) VALUES (:id, :customer);

-- name: schema_tables
SELECT name FROM sqlite_master
WHERE type = 'table' AND name NOT IN ('sqlite_sequence', 'outbox_schema_migrations')
ORDER BY name;

-- name: schema_table_columns
SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(:table)
ORDER BY cid;

-- name: schema_indexes
SELECT tbl_name, name, coalesce(sql, '') FROM sqlite_master
WHERE type = 'index' AND tbl_name <> 'outbox_schema_migrations'
ORDER BY tbl_name, name;

-- name: schema_triggers
SELECT tbl_name, name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY tbl_name, name;

-- name: schema_settings
SELECT name, value FROM outbox_settings ORDER BY name;

-- name: migration_forge
INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x');

-- name: migration_tamper
UPDATE outbox_schema_migrations SET checksum = 'tampered' WHERE version = 1;

-- name: outbox_delays
SELECT key, (julianday(available_at) - julianday(created_at)) * 86400.0, available_at
FROM outbox_events ORDER BY id;

-- name: outbox_row_state
-- Per row: what settle wrote, and seconds until available_at on the database clock.
SELECT id, attempts, status, last_error, published_at IS NOT NULL,
       (julianday(available_at) - julianday('now')) * 86400.0
FROM outbox_events ORDER BY id;

-- name: lease_remaining
-- Seconds until each lease ends on the database clock (NULL once released).
SELECT shard, owner, token,
       CASE WHEN lease_until = '' THEN NULL
            ELSE (julianday(lease_until) - julianday('now')) * 86400.0 END
FROM outbox_relay_leases ORDER BY shard;

-- name: outbox_headers_forge
UPDATE outbox_events
SET headers = json_set(headers, '$.event_id', :forged, '$.EVENT_TYPE', 'Forged', '$."x-user"', 'kept');

-- name: outbox_set_topic
-- A topic producer_lib would refuse, written past it (any role with UPDATE can).
UPDATE outbox_events SET topic = :topic WHERE id = :id;

-- name: outbox_headers_check_drop
-- The table as it was before 0004_headers_check.sql, for rows written before it.
DROP TRIGGER outbox_events_headers_insert;

-- name: outbox_insert_hostile
-- A row written around producer_lib; SQLite keeps a BLOB key or a TEXT payload as given.
INSERT INTO outbox_events (event_id, topic, key, shard, event_type, payload, headers)
VALUES (lower(hex(randomblob(16))), :topic, :key, :shard, 'Hostile', :payload, :headers)
RETURNING id;

-- name: outbox_headers_set
UPDATE outbox_events SET headers = :headers WHERE id = :id;

-- name: leases_lapse
UPDATE outbox_relay_leases SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds')
WHERE owner IS NOT NULL;

-- name: replicas_lapse
UPDATE outbox_relay_replicas SET seen_until = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds');

-- name: outbox_backoff_end
UPDATE outbox_events SET available_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds')
WHERE status = 'pending' AND attempts > 0 AND published_at IS NULL;

-- name: outbox_rows_kept
-- Every committed row, in id order (SQLite keeps published rows in outbox_events).
SELECT id, event_id, topic, key FROM outbox_events ORDER BY id;

-- name: outbox_rows_all
-- outbox_rows' columns for every committed row (SQLite keeps published rows in place).
SELECT id, event_id, topic, key, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events ORDER BY id;

-- Moving every clock column back by :s seconds is the clock moving on by as much: leases,
-- heartbeats, delays and retention expire without a test waiting for them. An empty
-- lease_until (never held) stays empty; published rows stay in outbox_events here.

-- name: rewind_outbox_events
UPDATE outbox_events
SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '-' || :s || ' seconds'),
    available_at = strftime('%Y-%m-%dT%H:%M:%fZ', available_at, '-' || :s || ' seconds'),
    published_at = strftime('%Y-%m-%dT%H:%M:%fZ', published_at, '-' || :s || ' seconds');

-- name: rewind_outbox_idempotency
UPDATE outbox_idempotency
SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '-' || :s || ' seconds');

-- name: rewind_outbox_relay_leases
UPDATE outbox_relay_leases
SET lease_until = strftime('%Y-%m-%dT%H:%M:%fZ', lease_until, '-' || :s || ' seconds')
WHERE lease_until <> '';

-- name: rewind_outbox_relay_replicas
UPDATE outbox_relay_replicas
SET started_at = strftime('%Y-%m-%dT%H:%M:%fZ', started_at, '-' || :s || ' seconds'),
    seen_until = strftime('%Y-%m-%dT%H:%M:%fZ', seen_until, '-' || :s || ' seconds');

-- name: rewind_processed_events
UPDATE processed_events
SET processed_at = strftime('%Y-%m-%dT%H:%M:%fZ', processed_at, '-' || :s || ' seconds');

-- name: outbox_available_epoch
SELECT id, (julianday(available_at) - 2440587.5) * 86400.0 FROM outbox_events ORDER BY id;
