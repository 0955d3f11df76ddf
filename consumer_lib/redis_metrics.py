"""The Redis source's stats and Prometheus metrics (a registry of its own per source).

Gauges are refreshed every gauges_interval_s from XPENDING and XINFO GROUPS; a scrape
never talks to Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass
class RedisSourceStats:
    applied: int = 0
    duplicates: int = 0
    redelivered: int = 0  # entries seen again (claimed, or this consumer's own pending)
    dead_lettered: int = 0
    lost: int = 0  # pending entries whose body was trimmed away
    transient_failures: int = 0
    handler_failures: int = 0
    skipped: int = 0
    dead_letters_kept: int = 0  # the dead-letter stream refused them: kept in the database


class RedisSourceMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.stats = RedisSourceStats()
        self.applied = Counter(
            "outbox_redis_consumer_events_processed",
            "Entries whose handler ran and whose transaction committed.",
            ["stream"],
            registry=r,
        )
        self.duplicates = Counter(
            "outbox_redis_consumer_duplicates_skipped",
            "Entries skipped because their event_id was already processed by the group.",
            ["stream"],
            registry=r,
        )
        self.redelivered = Counter(
            "outbox_redis_consumer_redeliveries",
            "Entries delivered more than once (claimed after idling, or taken back at start).",
            ["stream"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "outbox_redis_consumer_dead_lettered",
            "Entries moved to the dead-letter stream (undecodable, or the handler kept failing).",
            ["stream"],
            registry=r,
        )
        self.lost = Counter(
            "outbox_redis_consumer_lost_by_trim",
            "Pending entries whose body was trimmed from the stream before they were applied.",
            ["stream"],
            registry=r,
        )
        self.dead_letters_kept = Counter(
            "outbox_redis_consumer_dead_letters_kept",
            "Entries the dead-letter stream refused for good (no permission, wrong key type), "
            "kept in the consumer_dead_letters table instead.",
            ["stream"],
            registry=r,
        )
        self.pending = Gauge(
            "outbox_redis_consumer_pending_entries",
            "Entries delivered to the group and not yet acked (XPENDING).",
            ["stream"],
            registry=r,
        )
        self.oldest_pending_age = Gauge(
            "outbox_redis_consumer_oldest_pending_age_seconds",
            "Age of the oldest pending entry (from its id's time).",
            ["stream"],
            registry=r,
        )
        self.lag = Gauge(
            "outbox_redis_consumer_group_lag",
            "Entries in the stream not yet delivered to the group (XINFO GROUPS lag).",
            ["stream"],
            registry=r,
        )


class RedisOutcomes:
    """The apply policy's outcomes (consumer_lib.apply.Outcomes) counted per stream."""

    def __init__(self, metrics: RedisSourceMetrics, stream_of: Callable[[str], str]) -> None:
        self._m = metrics
        self._stream_of = stream_of

    def applied(self, topic: str, elapsed_s: float, events: int = 1) -> None:
        self._m.stats.applied += events
        self._m.applied.labels(self._stream_of(topic)).inc(events)

    def duplicate(self, topic: str, elapsed_s: float, events: int = 1) -> None:
        self._m.stats.duplicates += events
        self._m.duplicates.labels(self._stream_of(topic)).inc(events)

    def transient_failure(self) -> None:
        self._m.stats.transient_failures += 1

    def handler_failure(self) -> None:
        self._m.stats.handler_failures += 1

    def skipped(self) -> None:
        self._m.stats.skipped += 1
