"""The relay's Prometheus metrics, on a registry of its own (one per RelayService)."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import HistogramMetricFamily, Metric

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_BATCH_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class BatchHistogram:
    """A histogram that takes a whole batch's observations in one pass: Histogram.observe
    costs 1-4 µs of Python per call (measured: docs/benchmarks.md, "The commit-to-ack
    histogram's cost"), 10-40% of the relay's whole CPU per event. Here the batch's start times
    are sorted (in C; claims come nearly in creation order) and each bucket's count is one
    bisect: an event is in the bucket `le=b` when `now - start <= b`, i.e. `start >= now - b`.
    Exposed as a plain Prometheus histogram (`_bucket`, `_count`, `_sum`, `_created`)."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = [*map(float, buckets), float("inf")]
        self._counts = [0] * len(self._bounds)  # per bucket, not cumulative
        self._sum = 0.0
        self._created = time.time()
        registry.register(self)

    def observe_since(self, now: float, starts: Iterable[float]) -> None:
        """Observe `now - start` for every start (epoch seconds)."""
        ordered = sorted(starts)
        n = len(ordered)
        if not n:
            return
        added = []
        below = 0
        for bound in self._bounds:
            within = n - bisect_left(ordered, now - bound)
            added.append(within - below)
            below = within
        total = n * now - sum(ordered)
        # No lock: the scrape (outbox_core.ops_http) runs on the event loop that observes.
        self._counts = [c + a for c, a in zip(self._counts, added, strict=True)]
        self._sum += total

    def collect(self) -> Iterator[Metric]:
        cumulative, acc = [], 0
        for bound, count in zip(self._bounds, self._counts, strict=True):
            acc += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), float(acc)))
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], cumulative, sum_value=self._sum, timestamp=None)
        family.add_sample(f"{self.name}_created", {}, self._created)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)


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
        self.topic_unavailable = Counter(
            "outbox_relay_topic_unavailable",
            "Failed sends of rows whose topic is not on the cluster or not authorized for "
            'the relay, by topic (at most 50 topics named, the rest as topic="other").',
            ["topic"],
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
        self.latency = BatchHistogram(
            "outbox_relay_commit_to_ack_seconds",
            "Per event published, from its row's creation (its transaction) to the "
            "transport's ack.",
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
        # kafka_transactions (relay.transport.transactions)
        self.transactions = Counter(
            "outbox_relay_kafka_transactions",
            "Kafka transactions ended, by outcome (committed, aborted: a record refused "
            "inside it, or its commit failed).",
            ["outcome"],
            registry=r,
        )
        self.fenced = Counter(
            "outbox_relay_kafka_fenced",
            "Times this replica's transactional producer was fenced (a shard of it taken over).",
            registry=r,
        )
        self.recovered = Counter(
            "outbox_relay_recovered_rows",
            "Rows Kafka already had (read from the progress topic after a takeover or a "
            "transaction whose end was not known, or whose settle failed), settled before "
            "a claim instead of sent again.",
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
        # What this replica costs its database, statement by statement: a fleet's sum is
        # the fleet's cost (a standby shows heartbeats only).
        self.probes = Counter(
            "outbox_relay_probes",
            "Claims that found nothing (the probe): one statement each.",
            registry=r,
        )
        self.claims = Counter(
            "outbox_relay_claims", "Claims that returned rows: one statement each.", registry=r
        )
        self.settles = Counter(
            "outbox_relay_settles",
            "Settles of a claimed batch (mark published, record failures): one statement "
            "each on Postgres.",
            registry=r,
        )
        self.heartbeats = Counter(
            "outbox_relay_heartbeats",
            "Lease rounds that reached the database: two statements each, three while "
            "holding leases, plus one per lease taken.",
            registry=r,
        )
        self.active = Gauge(
            "outbox_relay_active",
            "1 while this replica is among those that hold shards (active_replicas), 0 while "
            "it stands by.",
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
