"""The consumer's Prometheus metrics, on a registry of its own (one per Consumer).

Served with /healthz and /readyz when ConsumerSettings.http_port is set (outbox_core.ops_http's
OpsServer). Lag is refreshed periodically from the client's state: a scrape never
talks to Kafka or the database.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ConsumerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.processed = Counter(
            "outbox_consumer_events_processed",
            "Events whose handler ran and whose transaction committed.",
            ["topic"],
            registry=r,
        )
        self.duplicates = Counter(
            "outbox_consumer_duplicates_skipped",
            "Events skipped because their event_id was already processed by the group.",
            ["topic"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "outbox_consumer_dead_lettered",
            "Records sent to the dead-letter topic (undecodable, or the handler kept failing).",
            ["topic"],
            registry=r,
        )
        self.dead_letters_kept = Counter(
            "outbox_consumer_dead_letters_kept",
            "Records the dead-letter topic can never take (too large, invalid topic name, not "
            "authorized), kept in the consumer_dead_letters table instead.",
            ["topic", "reason"],
            registry=r,
        )
        self.handler_latency = Histogram(
            "outbox_consumer_handler_seconds",
            "Time of one successful transaction: dedup insert, handler and commit.",
            ["topic"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.lag = Gauge(
            "outbox_consumer_lag",
            "Records on the partition not yet applied: highwater minus the next offset to "
            "process (refreshed periodically).",
            ["topic", "partition"],
            registry=r,
        )
        self.partitions = Gauge(
            "outbox_consumer_partitions_assigned", "Partitions this member holds.", registry=r
        )
