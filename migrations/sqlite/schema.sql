-- The whole current schema, for reading and for tools; tests/integration/test_migrations.py
-- proves that applying every migration in migrations/sqlite produces exactly this.

CREATE TABLE outbox_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

INSERT INTO outbox_settings (name, value) VALUES ('shard_count', '16');

CREATE TABLE outbox_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL CHECK (topic <> ''),
    key TEXT NOT NULL CHECK (key <> ''),
    shard INTEGER NOT NULL CHECK (shard >= 0),
    event_type TEXT NOT NULL,
    payload BLOB NOT NULL,
    headers TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    available_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'parked')),
    published_at TEXT,
    tenant TEXT CHECK (tenant <> '')
);

CREATE INDEX outbox_events_unpublished_idx ON outbox_events (shard, id)
    WHERE published_at IS NULL;
CREATE INDEX outbox_events_published_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL;
CREATE INDEX outbox_events_blocking_idx ON outbox_events (shard, key, id)
    WHERE published_at IS NULL AND (status = 'parked' OR attempts > 0);
CREATE INDEX outbox_events_tenant_idx ON outbox_events (shard, coalesce(tenant, ''), id)
    WHERE published_at IS NULL;

-- The CHECK on headers (a JSON object), as triggers (0004_headers_check.sql).
CREATE TRIGGER outbox_events_headers_insert BEFORE INSERT ON outbox_events
WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) IS NOT 'object' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_events_headers_check');
END;

CREATE TRIGGER outbox_events_headers_update BEFORE UPDATE OF headers ON outbox_events
WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) IS NOT 'object' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_events_headers_check');
END;

CREATE TABLE outbox_idempotency (
    scope TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    body_hash BLOB NOT NULL,
    event_id TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX outbox_idempotency_created_idx ON outbox_idempotency (created_at);

CREATE TABLE outbox_relay_leases (
    shard INTEGER PRIMARY KEY,
    owner TEXT,
    token INTEGER NOT NULL DEFAULT 0,
    lease_until TEXT NOT NULL DEFAULT ''
);

CREATE TABLE outbox_relay_replicas (
    owner TEXT PRIMARY KEY,
    started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    seen_until TEXT NOT NULL
);

CREATE TABLE processed_events (
    consumer_group TEXT NOT NULL,
    event_id TEXT NOT NULL,
    processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (consumer_group, event_id)
);
CREATE INDEX processed_events_group_age_idx ON processed_events (consumer_group, processed_at);

CREATE TABLE consumer_dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer_group TEXT NOT NULL,
    topic TEXT NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset TEXT NOT NULL,
    record_key BLOB,
    record_value BLOB,
    headers TEXT NOT NULL DEFAULT '[]',
    error_type TEXT NOT NULL,
    error TEXT NOT NULL,
    dead_letter_error TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (consumer_group, topic, source_partition, source_offset)
);
