-- The outbox, its idempotency keys, the relay's shard leases and the consumer's
-- processed-events table: the tables and columns of migrations/postgres/0001_initial.sql.
--
-- MariaDB commits each DDL statement by itself, so a migration cannot be one transaction:
-- every statement is written to be run again (IF NOT EXISTS) after a run that stopped
-- half-way. Tables are InnoDB, utf8mb4, compared byte for byte without padding
-- (utf8mb4_nopad_bin): two keys that differ in case or in trailing spaces are two keys,
-- as on Postgres. Times are DATETIME(6) in UTC (every session runs at time_zone '+00:00',
-- outbox_core/sql/mariadb/database.sql). `key` is a reserved word: always quoted.

CREATE TABLE IF NOT EXISTS outbox_settings (
    name varchar(255) NOT NULL PRIMARY KEY,
    value text NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Producers and relays must agree on it: the relay refuses to start on a mismatch.
INSERT INTO outbox_settings (name, value) VALUES ('shard_count', '16')
ON DUPLICATE KEY UPDATE name = name;

-- id: AUTO_INCREMENT hands out ids at insert, not at commit, as a Postgres identity does.
-- event_id: a UUID as its 36 characters of text. topic, key, event_type: as long as
-- producer_lib lets them be (Kafka's 249, 1024, 255).
CREATE TABLE IF NOT EXISTS outbox_events (
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
    CONSTRAINT outbox_events_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'parked')),
    CONSTRAINT outbox_events_topic_check CHECK (topic <> ''),
    CONSTRAINT outbox_events_key_check CHECK (`key` <> ''),
    CONSTRAINT outbox_events_shard_check CHECK (shard >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- MariaDB has no partial indexes; each of Postgres's becomes a plain index that serves
-- the same predicate.
-- Replaces outbox_events_unpublished_idx (shard, id) WHERE published_at IS NULL: a
-- shard's unpublished rows in id order are one range of (shard, NULL published_at).
CREATE INDEX IF NOT EXISTS outbox_events_unpublished_idx
    ON outbox_events (shard, published_at, id);
-- Replaces outbox_events_published_idx (published_at) WHERE published_at IS NOT NULL:
-- the NULLs sort first, the published rows are the range after them.
CREATE INDEX IF NOT EXISTS outbox_events_published_idx ON outbox_events (published_at);
-- Replaces outbox_events_blocking_idx (shard, key, id) WHERE published_at IS NULL AND
-- (status = 'parked' OR attempts > 0): the probe "an earlier failed row of this key?"
-- reads the key's unpublished rows below the candidate instead of the failed ones only.
-- A key indexes by its first 250 characters (InnoDB keys are at most 3072 bytes); a
-- longer key's rows are told apart by the row itself.
CREATE INDEX IF NOT EXISTS outbox_events_blocking_idx
    ON outbox_events (shard, `key`(250), id);

CREATE TABLE IF NOT EXISTS outbox_idempotency (
    scope varchar(255) NOT NULL,
    idempotency_key varchar(255) NOT NULL,
    body_hash varbinary(64) NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (scope, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX IF NOT EXISTS outbox_idempotency_created_idx ON outbox_idempotency (created_at);

-- lease_until: the earliest DATETIME stands for Postgres's '-infinity' (never held).
CREATE TABLE IF NOT EXISTS outbox_relay_leases (
    shard smallint NOT NULL PRIMARY KEY,
    owner varchar(255),
    token bigint NOT NULL DEFAULT 0,
    lease_until datetime(6) NOT NULL DEFAULT '1000-01-01 00:00:00.000000'
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Live relay replicas: each heartbeats its row; shards are split among the live ones.
CREATE TABLE IF NOT EXISTS outbox_relay_replicas (
    owner varchar(255) NOT NULL PRIMARY KEY,
    started_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    seen_until datetime(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS processed_events (
    consumer_group varchar(255) NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    processed_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (consumer_group, event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX IF NOT EXISTS processed_events_processed_at_idx ON processed_events (processed_at);
