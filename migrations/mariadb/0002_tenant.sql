-- An optional tenant per event (migrations/postgres/0002_tenant.sql). NULL is "no
-- tenant"; '' is refused.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS tenant varchar(255);
ALTER TABLE outbox_events
    ADD CONSTRAINT IF NOT EXISTS outbox_events_tenant_check CHECK (tenant <> '');

-- Replaces outbox_events_tenant_idx (shard, coalesce(tenant, ''), id) WHERE published_at
-- IS NULL: MariaDB indexes no expressions, and the untenanted rows (NULL) are one group
-- of their own at the start of each shard's range as '' would be.
CREATE INDEX IF NOT EXISTS outbox_events_tenant_idx ON outbox_events (shard, tenant, id);
