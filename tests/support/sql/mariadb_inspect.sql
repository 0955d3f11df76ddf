-- What the MariaDB tests read of a database's catalog (the current database's).

-- name: schema_tables
SELECT table_name, engine, table_collation FROM information_schema.tables
WHERE table_schema = DATABASE() ORDER BY table_name;

-- name: schema_columns
SELECT table_name, column_name, ordinal_position, column_type, is_nullable,
       column_default, collation_name, extra
FROM information_schema.columns
WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position;

-- name: schema_indexes
SELECT table_name, index_name, non_unique, seq_in_index, column_name, sub_part
FROM information_schema.statistics
WHERE table_schema = DATABASE() ORDER BY table_name, index_name, seq_in_index;

-- name: schema_constraints
SELECT table_name, constraint_name, check_clause FROM information_schema.check_constraints
WHERE constraint_schema = DATABASE() ORDER BY table_name, constraint_name;

-- name: schema_settings
SELECT name, value FROM outbox_settings ORDER BY name;

-- name: migrations_applied
SELECT version, name FROM outbox_schema_migrations ORDER BY version;

-- name: database_create
-- {database} is a name the test made itself ([a-z0-9_]).
CREATE DATABASE {database} CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;

-- name: database_drop
DROP DATABASE IF EXISTS {database};

-- name: rewind_processed_events
UPDATE processed_events SET processed_at = processed_at - INTERVAL %(s)s SECOND;

-- Read-back queries of the emit tests: inspect.sql's, with `key` quoted (a reserved word
-- here) and times in UTC.

-- name: test_order_insert
INSERT INTO test_orders (id, customer) VALUES (%(id)s, %(customer)s);
-- The store's tests (tests/support/db.py): MariaDB's twins of inspect.sql's read-backs
-- where those name the reserved word `key` or need MariaDB's time functions.

-- name: outbox_rows
SELECT id, event_id, topic, `key`, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events ORDER BY id;

-- name: outbox_parked
SELECT id, `key`, attempts, last_error FROM outbox_events WHERE status = 'parked' ORDER BY id;

-- name: outbox_snapshot
SELECT id, event_id, `key`, shard, payload, headers, attempts, status, last_error,
       available_at, published_at
FROM outbox_events ORDER BY id;

-- name: outbox_row_tenants
SELECT id, `key`, tenant FROM outbox_events ORDER BY id;

-- name: outbox_delays
SELECT `key`, TIMESTAMPDIFF(MICROSECOND, created_at, available_at) / 1e6, available_at
FROM outbox_events ORDER BY id;

-- name: outbox_created_lag
-- Seconds between each row's created_at and the server's UTC clock now.
SELECT TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) / 1e6 FROM outbox_events
ORDER BY id;

-- name: key_locks_count
SELECT count(*), min(slot), max(slot) FROM outbox_key_locks;

-- name: key_locks_clear
-- As a schema made by hand without the slot rows.
DELETE FROM outbox_key_locks;

-- name: key_lock_take
-- A writer of another key holding its slot; NOWAIT: error 1205/3572-like at once if taken.
SELECT slot FROM outbox_key_locks WHERE slot = %(slot)s FOR UPDATE NOWAIT;

-- name: session_time_zone_set
SET SESSION time_zone = '+05:00';

-- name: session_repeatable_read
SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ;

-- name: snapshot_open
-- Takes the REPEATABLE READ snapshot (the first consistent read of a transaction).
SELECT count(*) FROM outbox_settings;
-- name: outbox_row_state
-- Per row: what settle wrote, and seconds until available_at on the database clock.
-- Rows retention=keep moved into outbox_published are published (available_at: 0).
SELECT id, attempts, status, last_error, published_at IS NOT NULL,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at) / 1e6
FROM outbox_events
UNION ALL
SELECT id, attempts, 'pending', last_error, 1, 0.0 FROM outbox_published
ORDER BY 1;

-- name: lease_remaining
-- Seconds until each lease ends on the database clock (NULL once released).
SELECT shard, owner, token,
       CASE WHEN owner IS NULL THEN NULL
            ELSE TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) / 1e6 END
FROM outbox_relay_leases ORDER BY shard;

-- name: leases_lapse
UPDATE outbox_relay_leases SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE owner IS NOT NULL;

-- name: replicas_lapse
UPDATE outbox_relay_replicas SET seen_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND;

-- name: relay_session_settings
-- What the relay's init_command set on a session (outbox_core/mariadb_pool.session_init).
SELECT @outbox_replica_id, @@SESSION.innodb_lock_wait_timeout,
       @@SESSION.idle_transaction_timeout, CAST(@@SESSION.max_statement_time AS DOUBLE);

-- name: lease_row_hold
-- Another session holding a lease row (run in a transaction): whoever locks it next waits.
SELECT shard FROM outbox_relay_leases WHERE shard = %(shard)s FOR UPDATE;

-- name: session_read_committed
-- The relay's level, for a test's connection that changes rows beside open producer
-- transactions (outbox_backoff_end).
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- name: outbox_backoff_end
-- A scan of the primary key, on a connection at READ COMMITTED (session_read_committed):
-- there an UPDATE's scan of the clustered index reads a row another transaction holds (a
-- producer's uncommitted insert) semi-consistently and passes it by; through a secondary
-- index, or at REPEATABLE READ, it would wait for it.
UPDATE outbox_events FORCE INDEX (PRIMARY) SET available_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND
WHERE status = 'pending' AND attempts > 0 AND published_at IS NULL;

-- name: outbox_rows_kept
SELECT id, event_id, topic, `key` FROM outbox_events
UNION ALL
SELECT id, event_id, topic, `key` FROM outbox_published
ORDER BY 1;

-- name: outbox_rows_all
SELECT id, event_id, topic, `key`, shard, event_type, payload, headers, attempts, status,
       published_at, last_error
FROM outbox_events
UNION ALL
SELECT id, event_id, topic, `key`, shard, event_type, payload, headers, attempts, 'pending',
       published_at, last_error
FROM outbox_published
ORDER BY 1;

-- name: outbox_set_topic
UPDATE outbox_events SET topic = %(topic)s WHERE id = %(id)s;

-- name: outbox_headers_set
UPDATE outbox_events SET headers = %(headers)s WHERE id = %(id)s;

-- name: outbox_available_epoch
SELECT id, CAST(UNIX_TIMESTAMP(available_at) AS DOUBLE) FROM outbox_events ORDER BY id;

-- Moving every clock column back by :s seconds is the clock moving on by as much: leases,
-- heartbeats, delays and retention expire without a test waiting for them. A released
-- lease keeps its ancient lease_until.

-- name: rewind_outbox_events
UPDATE outbox_events
SET created_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), created_at),
    available_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), available_at),
    published_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), published_at);

-- name: rewind_outbox_published
UPDATE outbox_published
SET created_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), created_at),
    published_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), published_at);

-- name: rewind_outbox_idempotency
UPDATE outbox_idempotency
SET created_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), created_at);

-- name: rewind_outbox_relay_leases
UPDATE outbox_relay_leases
SET lease_until = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), lease_until)
WHERE owner IS NOT NULL;

-- name: rewind_outbox_relay_replicas
UPDATE outbox_relay_replicas
SET started_at = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), started_at),
    seen_until = TIMESTAMPADD(MICROSECOND, -ROUND(%(s)s * 1000000), seen_until);

-- name: outbox_fill
-- 20,000 pending rows at once, spread over 16 shards and 1000 keys; every tenth of tenant
-- A, every tenth plus one of tenant B.
INSERT INTO outbox_events (event_id, topic, `key`, shard, event_type, payload, headers, tenant)
SELECT UUID(), 'fill', CONCAT('k', seq MOD 1000), seq MOD 16, 'Filled', REPEAT('x', 300), '{}',
       CASE seq MOD 10 WHEN 0 THEN 'A' WHEN 1 THEN 'B' END
FROM seq_1_to_20000;

-- name: outbox_mark_published_below
UPDATE outbox_events SET published_at = UTC_TIMESTAMP(6) WHERE id < %(below)s;

-- name: outbox_mark_shard_published_below
UPDATE outbox_events SET published_at = UTC_TIMESTAMP(6) WHERE shard = %(shard)s AND id < %(below)s;

-- name: session_disk_tables
-- The internal temporary tables this session has written to disk (Aria) so far.
SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS
WHERE VARIABLE_NAME = 'CREATED_TMP_DISK_TABLES';

-- name: outbox_analyze
ANALYZE TABLE outbox_events;

-- name: outbox_headers_forge
-- A row's headers naming the relay's own headers, as a writer other than producer_lib
-- (which refuses them) could store them.
UPDATE outbox_events
SET headers = JSON_SET(headers, '$.event_id', %(forged)s, '$.EVENT_TYPE', 'Forged',
                       '$."x-user"', 'kept');

-- name: outbox_headers_check_drop
-- The table as it was before 0004_headers_check.sql, for rows written before it.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_headers_check;

-- name: outbox_insert_hostile
-- A row written around producer_lib, by any role with INSERT on the table.
INSERT INTO outbox_events (event_id, topic, `key`, shard, event_type, payload, headers)
VALUES (UUID(), %(topic)s, %(key)s, %(shard)s, 'Hostile', %(payload)s, %(headers)s)
RETURNING id;

-- name: innodb_status
-- The lock monitor, built when asked: every open transaction, and what each waits for.
SHOW ENGINE INNODB STATUS;

-- name: sessions_of_this_database
-- Each session on this database: what it runs and for how long.
SELECT id, command, state, time, info
FROM information_schema.processlist
WHERE db = DATABASE();

-- name: session_lock_wait_short
-- A lock wait ends with error 1205 after a second instead of the server's 50.
SET SESSION innodb_lock_wait_timeout = 1;

-- name: connection_kill
-- Ends another session's connection, as a server restart or a network cut would.
KILL CONNECTION %(id)s;

-- name: session_inserts
-- INSERT statements this session has run (emit_batch sends one for a whole batch).
SHOW SESSION STATUS LIKE 'Com_insert';
