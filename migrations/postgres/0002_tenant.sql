-- An optional tenant per event (issue 16). The relay's fair claims (fair_tenants) take
-- turns between the tenants of a shard, so one tenant's backlog cannot hold the others
-- back. NULL is "no tenant": the untenanted rows take their turns as one tenant of their
-- own. '' is refused, so that coalesce(tenant, '') names exactly the untenanted rows.
ALTER TABLE outbox_events ADD COLUMN tenant text;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_tenant_check CHECK (tenant <> '');

-- The fair claim finds a shard's tenants by skipping through this index (one probe per
-- tenant) and walks each tenant's rows in id order; like the claim's other index it holds
-- only unpublished rows. Building it reads the table once while writes wait: on a large
-- retained table, migrate at a quiet moment.
CREATE INDEX outbox_events_tenant_idx ON outbox_events (shard, (coalesce(tenant, '')), id)
    WHERE published_at IS NULL;
