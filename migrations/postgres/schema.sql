-- The whole current schema, for reading and for tools; tests/integration/test_migrations.py
-- proves that applying every migration in migrations/postgres produces exactly this.

CREATE TABLE outbox_settings (
    name text PRIMARY KEY,
    value text NOT NULL
);

-- Producers and relays must agree on it: the relay refuses to start on a mismatch.
INSERT INTO outbox_settings (name, value) VALUES ('shard_count', '16');

CREATE TABLE outbox_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id uuid NOT NULL,
    topic text NOT NULL,
    key text NOT NULL,
    shard smallint NOT NULL,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    available_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    status text NOT NULL DEFAULT 'pending',
    published_at timestamptz,
    -- NULL: no tenant (0002_tenant.sql).
    tenant text,
    CONSTRAINT outbox_events_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'parked')),
    CONSTRAINT outbox_events_topic_check CHECK (topic <> ''),
    CONSTRAINT outbox_events_key_check CHECK (key <> ''),
    CONSTRAINT outbox_events_shard_check CHECK (shard >= 0),
    CONSTRAINT outbox_events_tenant_check CHECK (tenant <> ''),
    -- NOT VALID in a database migrated from before 0004_headers_check.sql.
    CONSTRAINT outbox_events_headers_check CHECK (jsonb_typeof(headers) = 'object')
);

-- Claims only ever look at unpublished rows of one shard in id order; keeping
-- published rows out of the index keeps claims cheap on a large retained table.
CREATE INDEX outbox_events_unpublished_idx ON outbox_events (shard, id)
    WHERE published_at IS NULL;
CREATE INDEX outbox_events_published_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL;
-- Under the block_key policy a claim asks, per candidate row, "is an earlier row of this
-- key parked or backing off?". Only failed rows can answer yes, and they are few: this
-- index holds just them, so the question costs one probe of a tiny index whatever the
-- backlog or the planner's statistics (an index of every unpublished row let a plan
-- made on an empty table rescan the whole shard per candidate).
CREATE INDEX outbox_events_blocking_idx ON outbox_events (shard, key, id)
    WHERE published_at IS NULL AND (status = 'parked' OR attempts > 0);
-- Fair claims: a shard's tenants (a skip scan, one probe each) and each tenant's rows in
-- id order, the untenanted ones under ''.
CREATE INDEX outbox_events_tenant_idx ON outbox_events (shard, (coalesce(tenant, '')), id)
    WHERE published_at IS NULL;

-- retention=keep: published rows, moved here by the settle, partitioned by publish time
-- (0005_published_history.sql). The relay creates the partitions ahead and drops those
-- past the retention through outbox_published_rotate(), which `outbox-relay migrate`
-- installs (outbox_core/sql/postgres/outbox_published.sql) with the DEFAULT partition;
-- partitions are data, not schema, so the comparisons of schemas leave them out.
CREATE TABLE outbox_published (
    id bigint NOT NULL,
    event_id uuid NOT NULL,
    topic text NOT NULL,
    key text NOT NULL,
    shard smallint NOT NULL,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    attempts integer NOT NULL,
    last_error text,
    published_at timestamptz NOT NULL,
    tenant text,
    CONSTRAINT outbox_published_pkey PRIMARY KEY (id, published_at)
) PARTITION BY RANGE (published_at);
CREATE INDEX outbox_published_published_idx ON outbox_published (published_at);
CREATE TABLE outbox_published_default PARTITION OF outbox_published DEFAULT;

CREATE TABLE outbox_idempotency (
    scope text NOT NULL,
    idempotency_key text NOT NULL,
    body_hash bytea NOT NULL,
    event_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX outbox_idempotency_created_idx ON outbox_idempotency (created_at);

CREATE TABLE outbox_relay_leases (
    shard smallint PRIMARY KEY,
    owner text,
    token bigint NOT NULL DEFAULT 0,
    lease_until timestamptz NOT NULL DEFAULT '-infinity'
);

-- Live relay replicas: each heartbeats its row; shards are split among the live ones.
CREATE TABLE outbox_relay_replicas (
    owner text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_until timestamptz NOT NULL
);

CREATE TABLE processed_events (
    consumer_group text NOT NULL,
    event_id uuid NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, event_id)
);
-- One group's old rows, for that group's purge.
CREATE INDEX processed_events_group_age_idx ON processed_events (consumer_group, processed_at);

-- Records a consumer could neither apply nor put on its dead-letter topic, because the
-- topic can never take them (too large, an invalid topic name, not authorized). The
-- consumer keeps them here, in its own database, and moves on. One row per record and
-- group: a record seen again after a crash is not kept twice. source_offset is the Kafka
-- offset, or the Redis stream entry id (source_partition -1).
CREATE TABLE consumer_dead_letters (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group text NOT NULL,
    topic text NOT NULL,
    source_partition integer NOT NULL,
    source_offset text NOT NULL,
    record_key bytea,
    record_value bytea,
    headers jsonb NOT NULL DEFAULT '[]'::jsonb,
    error_type text NOT NULL,
    error text NOT NULL,
    dead_letter_error text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumer_dead_letters_record_key
        UNIQUE (consumer_group, topic, source_partition, source_offset)
);
