"""The relay's Prometheus metrics, on a registry of its own (one per RelayService)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_BATCH_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class RelayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.published = Counter(
            "outbox_relay_events_published",
            "Events acked by the transport (Kafka or Redis) and settled.",
            ["topic"],
            registry=r,
        )
        self.failures = Counter(
            "outbox_relay_publish_failures",
            "Failed sends recorded on rows, by reason (RecordTooLarge, UnknownTopic, Timeout, ...).",
            ["reason"],
            registry=r,
        )
        self.parked = Counter(
            "outbox_relay_events_parked", "Rows parked by this relay.", registry=r
        )
        self.transport_outages = Counter(
            "outbox_relay_transport_unavailable",
            "Batches where every send failed with a transport error, Kafka or Redis away "
            "(not counted on rows).",
            registry=r,
        )
        self.held_back = Counter(
            "outbox_relay_rows_held_back",
            "Claimed rows not sent, to keep their key in order (an earlier row of the key "
            "failed, or needs its ack first): claimed again by a later cycle.",
            registry=r,
        )
        self.batch_size = Histogram(
            "outbox_relay_batch_rows",
            "Rows claimed per non-empty batch.",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "outbox_relay_commit_to_ack_seconds",
            "Per batch, from the creation (its transaction) of the oldest row published to "
            "the transport's ack.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.leases_held = Gauge(
            "outbox_relay_leases_held", "Shards this replica holds.", registry=r
        )
        self.takeovers = Counter(
            "outbox_relay_lease_takeovers", "Leases taken over from an expired holder.", registry=r
        )
        self.losses = Counter(
            "outbox_relay_lease_losses", "Leases lost (expired or fenced).", registry=r
        )
        self.recreations = Counter(
            "outbox_relay_producer_recreations",
            "Producers (Kafka producer, Redis client) replaced after a fatal error.",
            registry=r,
        )
        self.pending = Gauge(
            "outbox_relay_pending_rows",
            "Unpublished pending rows (refreshed periodically).",
            registry=r,
        )
        self.parked_rows = Gauge(
            "outbox_relay_parked_rows", "Parked rows (refreshed periodically).", registry=r
        )
        self.oldest_pending_age = Gauge(
            "outbox_relay_oldest_pending_age_seconds",
            "Age of the oldest unpublished pending row (refreshed periodically).",
            registry=r,
        )
        self.replicas = Gauge("outbox_relay_replicas_live", "Live relay replicas seen.", registry=r)
        self.horizon_age = Gauge(
            "outbox_db_horizon_age_seconds",
            "Age of the oldest transaction, snapshot or prepared transaction that keeps "
            "vacuum from the outbox's dead rows, by kind; 0 when there is none "
            "(Postgres, refreshed periodically).",
            ["kind"],
            registry=r,
        )
        self.horizon_xid_age = Gauge(
            "outbox_db_horizon_xid_age",
            "Transactions since the oldest xid or xmin that keeps vacuum from the outbox's "
            "dead rows, by kind (replication_slot included); 0 when there is none.",
            ["kind"],
            registry=r,
        )
        self.ready = Gauge(
            "outbox_relay_ready",
            "1 while /readyz answers 200, else 0 (read at scrape).",
            registry=r,
        )
        self.tenant_pending = Gauge(
            "outbox_relay_tenant_pending_rows",
            "Unpublished pending rows of the tenants with the most of them; the rest as "
            'tenant="other", untenanted rows as tenant="none" (refreshed periodically).',
            ["tenant"],
            registry=r,
        )
        self.tenant_oldest_pending_age = Gauge(
            "outbox_relay_tenant_oldest_pending_age_seconds",
            "Age of the oldest unpublished pending row, by tenant as "
            "outbox_relay_tenant_pending_rows (refreshed periodically).",
            ["tenant"],
            registry=r,
        )
