-- The whole current schema, for reading and for tools; tests/integration/test_mariadb.py
-- proves that applying every migration in migrations/mariadb produces exactly this. The
-- migrations say why each choice differs from Postgres's (0001_initial.sql).

CREATE TABLE outbox_settings (
    name varchar(255) NOT NULL PRIMARY KEY,
    value text NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Producers and relays must agree on it: the relay refuses to start on a mismatch.
INSERT INTO outbox_settings (name, value) VALUES ('shard_count', '16');

CREATE TABLE outbox_events (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic varchar(249) NOT NULL,
    `key` varchar(1024) NOT NULL,
    shard smallint NOT NULL,
    event_type varchar(255) NOT NULL,
    payload longblob NOT NULL,
    headers json NOT NULL DEFAULT '{}',
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    available_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    status varchar(16) NOT NULL DEFAULT 'pending',
    published_at datetime(6),
    tenant varchar(255),
    -- 1 for a row that can hold its key's later rows back (0007_blocking_rows.sql).
    blocking tinyint AS (
        CASE WHEN published_at IS NULL AND (status = 'parked' OR attempts > 0) THEN 1 END
    ) VIRTUAL,
    CONSTRAINT outbox_events_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'parked')),
    CONSTRAINT outbox_events_topic_check CHECK (topic <> ''),
    CONSTRAINT outbox_events_key_check CHECK (`key` <> ''),
    CONSTRAINT outbox_events_shard_check CHECK (shard >= 0),
    CONSTRAINT outbox_events_tenant_check CHECK (tenant <> ''),
    CONSTRAINT outbox_events_headers_check CHECK (json_type(headers) = 'OBJECT')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- MariaDB has no partial indexes: these serve the predicates of Postgres's partial ones.
CREATE INDEX outbox_events_unpublished_idx ON outbox_events (shard, published_at, id);
CREATE INDEX outbox_events_published_idx ON outbox_events (published_at);
CREATE INDEX outbox_events_blocking_idx ON outbox_events (blocking, shard, `key`(250), id);
CREATE INDEX outbox_events_tenant_idx ON outbox_events (shard, tenant, id);

CREATE TABLE outbox_idempotency (
    scope varchar(255) NOT NULL,
    idempotency_key varchar(255) NOT NULL,
    body_hash varbinary(64) NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (scope, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX outbox_idempotency_created_idx ON outbox_idempotency (created_at);

CREATE TABLE outbox_relay_leases (
    shard smallint NOT NULL PRIMARY KEY,
    owner varchar(255),
    token bigint NOT NULL DEFAULT 0,
    lease_until datetime(6) NOT NULL DEFAULT '1000-01-01 00:00:00.000000'
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE outbox_relay_replicas (
    owner varchar(255) NOT NULL PRIMARY KEY,
    started_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    seen_until datetime(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE processed_events (
    consumer_group varchar(255) NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    processed_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (consumer_group, event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX processed_events_group_age_idx ON processed_events (consumer_group, processed_at);

CREATE TABLE consumer_dead_letters (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer_group varchar(255) NOT NULL,
    topic varchar(249) NOT NULL,
    source_partition integer NOT NULL,
    source_offset varchar(64) NOT NULL,
    record_key longblob,
    record_value longblob,
    headers json NOT NULL DEFAULT '[]',
    error_type text NOT NULL,
    error text NOT NULL,
    dead_letter_error text NOT NULL,
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT consumer_dead_letters_record_key
        UNIQUE (consumer_group, topic, source_partition, source_offset)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE outbox_published (
    id bigint NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic varchar(249) NOT NULL,
    `key` varchar(1024) NOT NULL,
    shard smallint NOT NULL,
    event_type varchar(255) NOT NULL,
    payload longblob NOT NULL,
    headers json NOT NULL,
    created_at datetime(6) NOT NULL,
    attempts integer NOT NULL,
    last_error text,
    published_at datetime(6) NOT NULL,
    tenant varchar(255),
    PRIMARY KEY (id, published_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX outbox_published_published_idx ON outbox_published (published_at);

-- MariaDB only: the rows producer_lib's emit locks per key (0006_key_locks.sql), 0..4095.
CREATE TABLE outbox_key_locks (
    slot integer NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

INSERT INTO outbox_key_locks (slot)
SELECT a.d + 16 * b.d + 256 * c.d
FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS a
CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS b
CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
      UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
      UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS c;
