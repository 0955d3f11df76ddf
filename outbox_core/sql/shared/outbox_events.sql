-- Queries on outbox_events that every dialect writes alike, `:name` parameters (the
-- registry rewrites them to each driver's style). Each dialect's outbox_events.sql writes
-- the fragments these are composed of: claim_per_shard(tenant, rule) (a shard's next rows
-- in id order), claim_by_turns(rule) (the same rows chosen by tenant turns),
-- key_not_blocked (the block_key rule) and one_tenant (a lane's one tenant).

-- name: outbox_claim_batch
-- The next rows of each shard, up to limit per shard, each shard's rows in id order, under
-- the block_key policy: a row waits while an earlier row of its key is parked or backing
-- off after a failure.
{{claim_per_shard(tenant=nothing, rule=key_not_blocked)}};

-- name: outbox_claim_batch_skip
-- skip policy: failed and parked rows hold nothing back.
{{claim_per_shard(tenant=nothing, rule=nothing)}};

-- name: outbox_claim_batch_tenant
-- fair_tenants, a lane claiming for one tenant (relay/lanes.py: the bulk lane while one
-- tenant has a backlog). Turns within one tenant are its rows in id order, so this returns
-- what outbox_claim_batch_fair would (limit is min(tenant_max_rows, batch_size)), but as
-- outbox_claim_batch does: one walk of that tenant's entries of outbox_events_tenant_idx
-- per shard, each row read once (the fair claim ranks ids, then reads the rows again).
{{claim_per_shard(tenant=one_tenant, rule=key_not_blocked)}};

-- name: outbox_claim_batch_tenant_skip
{{claim_per_shard(tenant=one_tenant, rule=nothing)}};

-- name: outbox_claim_batch_fair
-- fair_tenants: which of a shard's rows make its batch is decided by turns between the
-- shard's tenants (claim_by_turns).
{{claim_by_turns(rule=key_not_blocked)}};

-- name: outbox_claim_batch_fair_skip
{{claim_by_turns(rule=nothing)}};

-- fragment: tenants_by_pending(rows)
-- For the per-tenant gauges: pending rows and the oldest one's age of the `top` tenants
-- with the most pending rows (tenant NULL: the untenanted rows, other false), and the
-- rest summed into one row (other true), so the label set stays bounded. One pass over
-- at most count_limit pending rows per refresh, never per scrape, so its cost is bounded
-- whatever the backlog: past the limit the counts are those of the rows walked first.
-- rows: where the outbox's rows `e` are read from (Postgres: above each shard's claim
-- floor, where every row is published).
WITH walked AS (
    SELECT e.tenant, e.created_at
    FROM {{rows}}
    WHERE e.published_at IS NULL AND e.status = 'pending'
    LIMIT :count_limit
),
per_tenant AS (
    SELECT tenant, count(*) AS pending, min(created_at) AS oldest
    FROM walked
    GROUP BY tenant
),
ranked AS (
    -- place: the rank by pending rows, ties by tenant, NULL first (the untenanted rows;
    -- written without NULLS FIRST, which MariaDB lacks). The gauges' rows are read in it.
    SELECT tenant, pending, oldest, place, place > :top AS other
    FROM (
        SELECT tenant, pending, oldest,
               row_number() OVER (ORDER BY pending DESC, tenant IS NOT NULL, tenant) AS place
        FROM per_tenant
    ) AS placed
)
