-- retention=keep moves published rows out of outbox_events into outbox_published, a table
-- partitioned by publish time: the purge drops whole partitions past the retention instead
-- of deleting rows, so neither the settle (a DELETE from outbox_events, an INSERT here: no
-- new row version in outbox_events) nor the purge leaves dead tuples in the history.
-- docs/design.md ("Published rows") explains the design, docs/operations.md the upgrade.
--
-- The relay creates the partitions ahead and drops the old ones (outbox_published_rotate,
-- installed by `outbox-relay migrate`); the DEFAULT partition takes any row no partition
-- covers, so a settle never fails while that maintenance lags.
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

-- The rows already published go into one partition from the epoch to now (its name, like
-- every partition's, is outbox_published_p<from>_<to> in seconds since the epoch, here
-- rounded up); it is dropped whole once its upper bound is older than the retention. Rows
-- a relay publishes after this land in outbox_published_default until the relay's first
-- purge round makes partitions; rows published by a relay from before this migration
-- stay in outbox_events: the purge deletes both kinds in batches, as before.
DO $migration$
BEGIN
    EXECUTE 'CREATE TABLE '
        || quote_ident('outbox_published_p0_' || ceil(extract(epoch FROM now()))::bigint)
        || ' PARTITION OF outbox_published FOR VALUES FROM ('
        || quote_literal(to_timestamp(0)) || ') TO (' || quote_literal(now()) || ')';
END
$migration$;

WITH moved AS (
    DELETE FROM outbox_events WHERE published_at IS NOT NULL
    RETURNING id, event_id, topic, key, shard, event_type, payload, headers, created_at,
              attempts, last_error, published_at, tenant
)
INSERT INTO outbox_published (id, event_id, topic, key, shard, event_type, payload, headers,
                              created_at, attempts, last_error, published_at, tenant)
SELECT id, event_id, topic, key, shard, event_type, payload, headers, created_at, attempts,
       last_error, published_at, tenant
FROM moved;
