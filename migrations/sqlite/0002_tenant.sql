-- An optional tenant per event; see the Postgres twin for what NULL and the index mean.
ALTER TABLE outbox_events ADD COLUMN tenant TEXT CHECK (tenant <> '');

CREATE INDEX outbox_events_tenant_idx ON outbox_events (shard, coalesce(tenant, ''), id)
    WHERE published_at IS NULL;
