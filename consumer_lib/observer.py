"""One observer of what a consumer does: it feeds both the stats tests and benchmarks read
(ConsumerStats) and the Prometheus metrics (ConsumerMetrics), so the two never drift apart,
and keeps what /readyz reports (Kafka and the database reachable). Call sites tell the
observer what happened; none of them touches the stats or the metrics itself."""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from consumer_lib.metrics import ConsumerMetrics


@dataclass
class ConsumerStats:
    processed: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    # Records the dead-letter topic could never take, kept in consumer_dead_letters.
    dead_letters_kept: int = 0
    skipped: int = 0
    transient_retries: int = 0
    handler_failures: int = 0
    commits: int = 0
    commit_failures: int = 0
    # The most recent durations only (a long-running consumer must not grow without bound);
    # the outbox_consumer_handler_seconds histogram has them all.
    handler_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=10_000), repr=False)


class ConsumerObserver:
    def __init__(self) -> None:
        self.stats = ConsumerStats()
        self.metrics = ConsumerMetrics()
        self.kafka_ok = False  # started, and the last fetch did not fail
        self.db_ok = True  # the last transaction did not fail transiently

    # ------------------------------------------------------------------ Kafka

    def kafka_reachable(self, ok: bool) -> None:
        """Kafka started or a fetch worked (True), or a fetch failed (False)."""
        self.kafka_ok = ok

    def committed(self) -> None:
        self.stats.commits += 1

    def commit_failed(self) -> None:
        self.stats.commit_failures += 1

    def assigned(self, partitions: int) -> None:
        self.metrics.partitions.set(partitions)

    def lag(self, tp: TopicPartition, records: int) -> None:
        self.metrics.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(records)

    def revoked(self, tp: TopicPartition) -> None:
        with contextlib.suppress(KeyError):  # no lag was reported for it yet
            self.metrics.lag.remove(tp.topic, str(tp.partition))

    # ------------------------------------------------------------------ records

    def applied(self, topic: str, elapsed_s: float, events: int = 1) -> None:
        """The handlers of `events` events of the topic ran and their transaction committed;
        elapsed_s: that transaction's time per event."""
        self._transaction(elapsed_s, events)
        self.stats.processed += events
        self.metrics.processed.labels(topic=topic).inc(events)
        latency = self.metrics.handler_latency.labels(topic=topic)
        for _ in range(events):
            latency.observe(elapsed_s)

    def duplicate(self, topic: str, elapsed_s: float, events: int = 1) -> None:
        """The group had applied the events already: their handlers did not run."""
        self._transaction(elapsed_s, events)
        self.stats.duplicates += events
        self.metrics.duplicates.labels(topic=topic).inc(events)

    def _transaction(self, elapsed_s: float, events: int) -> None:
        self.db_ok = True
        self.stats.handler_seconds.extend([elapsed_s] * events)

    def transient_failure(self) -> None:
        self.db_ok = False
        self.stats.transient_retries += 1

    def handler_failure(self) -> None:
        self.stats.handler_failures += 1

    def skipped(self) -> None:
        self.stats.skipped += 1

    def dead_lettered(self, topic: str) -> None:
        self.stats.dead_lettered += 1
        self.metrics.dead_lettered.labels(topic=topic).inc()

    def dead_letter_kept(self, topic: str, reason: str) -> None:
        """The dead-letter topic can never take the record: kept in the database."""
        self.stats.dead_letters_kept += 1
        self.metrics.dead_letters_kept.labels(topic=topic, reason=reason).inc()
