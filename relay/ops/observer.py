"""One observer of what the relay does: it feeds both the stats the probes and tests read
(RelayStats) and the Prometheus metrics (RelayMetrics), so the two never drift apart."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from relay.ops.metrics import RelayMetrics
from relay.pipeline.step import BatchOutcome
from relay.store import Backlog, HorizonHolder, TenantBacklog

# Labels of the per-tenant gauges besides the tenants' names. A tenant of the same name
# shares its label with them (its rows are added in).
UNTENANTED = "none"
OTHER_TENANTS = "other"
# outbox_relay_topic_unavailable_total names at most this many topics (rows can name any
# topic); the others share the label "other".
MAX_TOPIC_LABELS = 50
OTHER_TOPICS = "other"
HORIZON_KINDS = ("transaction", "snapshot", "replication_slot", "prepared_xact")


@dataclass
class RelayStats:
    published: int = 0
    retried: int = 0
    parked: int = 0
    held_back: int = 0
    batches: int = 0
    lease_losses: int = 0
    takeovers: int = 0
    producer_recreations: int = 0
    transport_outages: int = 0
    store_errors: int = 0
    probes: int = 0  # claims that found nothing
    claims: int = 0  # claims that returned rows
    settles: int = 0
    heartbeats: int = 0
    transactions_committed: int = 0  # kafka_transactions
    transactions_aborted: int = 0
    fenced: int = 0
    recovered: int = 0  # rows settled from the progress topic
    last_heartbeat_ok: float = 0.0  # monotonic time of the last successful lease round
    transport: str = "kafka"  # the configured transport: kafka or redis
    transport_ok: bool = False  # the producer started and the last batch reached the transport
    # Per lane, the monotonic time of its last cycle that settled a row or found none due.
    progress: dict[str, float] = field(default_factory=dict)


class RelayObserver:
    def __init__(self, transport: str = "kafka") -> None:
        self.stats = RelayStats(transport=transport)
        self.metrics = RelayMetrics()
        self._tenant_labels: set[str] = set()
        self._topic_labels: set[str] = set()

    def batch(self, outcome: BatchOutcome) -> None:
        st, m = self.stats, self.metrics
        st.batches += 1
        st.published += outcome.published
        st.retried += outcome.retried
        st.parked += outcome.parked
        if outcome.held_back:
            st.held_back += outcome.held_back
            m.held_back.inc(outcome.held_back)
        if outcome.claimed:
            m.batch_size.observe(outcome.claimed)
        if outcome.published:
            st.transport_ok = True
        for topic, count in outcome.published_by_topic.items():
            m.published.labels(topic=topic).inc(count)
        for reason, count in outcome.failures_by_reason.items():
            m.failures.labels(reason=reason.label).inc(count)
        for topic, count in outcome.unavailable_by_topic.items():
            m.topic_unavailable.labels(topic=self._topic_label(topic)).inc(count)
        if outcome.parked:
            m.parked.inc(outcome.parked)
        if outcome.published_created_at:
            m.latency.observe_since(outcome.acked_at, outcome.published_created_at)

    def _topic_label(self, topic: str) -> str:
        if topic in self._topic_labels:
            return topic
        if len(self._topic_labels) >= MAX_TOPIC_LABELS:
            return OTHER_TOPICS
        self._topic_labels.add(topic)
        return topic

    def cycle(self, lane: str, outcome: BatchOutcome | None) -> None:
        """A lane's cycle ended: progress when it settled a row, or found none due
        (outcome None: nothing to claim for, no shard held)."""
        settled = outcome.published + outcome.retried + outcome.parked if outcome else 0
        if outcome is None or not outcome.claimed or settled:
            self.stats.progress[lane] = time.monotonic()

    def stalled(self, limit_s: float) -> str | None:
        """What is stalled: a lane whose cycles have settled nothing for more than limit_s
        while rows were due (the claims returned rows, or none completed)."""
        if not self.stats.progress:
            return None  # no lane runs yet: start-up has its own checks
        lane, last = min(self.stats.progress.items(), key=lambda item: item[1])
        quiet = time.monotonic() - last
        if quiet <= limit_s:
            return None
        return f"{lane}: nothing settled for {quiet:.0f}s with rows due (limit {limit_s:.0f}s)"

    def transport_started(self) -> None:
        self.stats.transport_ok = True

    def transport_outage(self) -> None:
        self.stats.transport_outages += 1
        self.stats.transport_ok = False
        self.metrics.transport_outages.inc()

    def store_error(self) -> None:
        self.stats.store_errors += 1

    def lease_round(self, replicas: int, held: int, *, active: bool = True) -> None:
        self.stats.last_heartbeat_ok = time.monotonic()
        self.stats.heartbeats += 1
        self.metrics.heartbeats.inc()
        self.metrics.replicas.set(replicas)
        self.metrics.leases_held.set(held)
        self.metrics.active.set(1.0 if active else 0.0)

    def claimed(self, rows: int) -> None:
        """A claim statement ran: rows 0 is a probe."""
        if rows:
            self.stats.claims += 1
            self.metrics.claims.inc()
        else:
            self.stats.probes += 1
            self.metrics.probes.inc()

    def settled(self) -> None:
        self.stats.settles += 1
        self.metrics.settles.inc()

    def lease_lost(self) -> None:
        self.stats.lease_losses += 1
        self.metrics.losses.inc()

    def takeover(self) -> None:
        self.stats.takeovers += 1
        self.metrics.takeovers.inc()

    def transaction_ended(self, committed: bool) -> None:
        if committed:
            self.stats.transactions_committed += 1
        else:
            self.stats.transactions_aborted += 1
        self.metrics.transactions.labels(outcome="committed" if committed else "aborted").inc()

    def fenced(self) -> None:
        self.stats.fenced += 1
        self.metrics.fenced.inc()

    def recovered(self, rows: int) -> None:
        self.stats.recovered += rows
        self.metrics.recovered.inc(rows)

    def producer_recreated(self) -> None:
        self.stats.producer_recreations += 1
        self.metrics.recreations.inc()

    def backlog(self, backlog: Backlog) -> None:
        self.metrics.pending.set(backlog.pending)
        self.metrics.parked_rows.set(backlog.parked)
        self.metrics.oldest_pending_age.set(backlog.oldest_pending_age_s)

    def horizon(self, holders: list[HorizonHolder]) -> None:
        """Every kind is set on each look (0: none open), so an alert sees it clear."""
        by_kind: dict[str, HorizonHolder] = {h.kind: h for h in holders}
        m = self.metrics
        for kind in HORIZON_KINDS:
            h = by_kind.get(kind)
            m.horizon_age.labels(kind=kind).set(0.0 if h is None else h.age_s or 0.0)
            m.horizon_xid_age.labels(kind=kind).set(0 if h is None else h.xid_age)

    def tenant_backlog(self, rows: list[TenantBacklog]) -> None:
        """Set the per-tenant gauges to this refresh's top tenants and "other", and remove
        the labels of tenants no longer among them, so the label set stays bounded."""
        # "other" is always there (0 when every tenant is named): a series to alert on.
        pending: dict[str, int] = {OTHER_TENANTS: 0}
        oldest: dict[str, float] = {OTHER_TENANTS: 0.0}
        for row in rows:
            label = OTHER_TENANTS if row.other else row.tenant or UNTENANTED
            pending[label] = pending.get(label, 0) + row.pending
            oldest[label] = max(oldest.get(label, 0.0), row.oldest_pending_age_s)
        m = self.metrics
        for label in self._tenant_labels - pending.keys():
            m.tenant_pending.remove(label)
            m.tenant_oldest_pending_age.remove(label)
        for label, count in pending.items():
            m.tenant_pending.labels(tenant=label).set(count)
            m.tenant_oldest_pending_age.labels(tenant=label).set(oldest[label])
        self._tenant_labels = set(pending)
