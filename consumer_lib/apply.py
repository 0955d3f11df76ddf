"""The apply policy: what becomes of a record, or of a batch of a partition's records.

Decode it; in one database transaction record (group, event_id) and run the handler (a
duplicate skips the handler). Transient failures (the database or a dependency briefly
away) are retried with backoff and without limit; the handler's own failures count, and
after max_attempts the record is dead-lettered. A record that cannot be decoded, has no
event_id or no handler is dead-lettered or skipped as the settings say. Either way it is
then settled; only stopping, or its partition being revoked, while it still fails leaves
it (Abandon) for the next owner: a rebalance never waits for a database that is away.
A batch is retried whole on transient failures; on a handler failure it reports so and
the caller re-applies its records one at a time (consumer_lib.batch_apply).

The Kafka consumer and the Redis Streams source both run it: a source gives it records
(SourceRecord), where its outcomes go (Outcomes), its dead-letter destination
(DeadLetterSink) and whether it still owns a record's partition (Ownership).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from aiokafka import TopicPartition

from consumer_lib.app import ConsumerApp, Registration
from consumer_lib.errors import PoisonReason, PoisonRecord, is_transient
from consumer_lib.event import ConsumedEvent, SourceRecord, decode
from consumer_lib.record_formats import DebeziumHeaders
from consumer_lib.work import Job, Work
from outbox_core.backoff import Backoff
from outbox_core.driver_errors import first_line
from outbox_core.supervisor import Supervisor

log = logging.getLogger("consumer_lib")


class Abandon(Exception):
    """Stopping, or the partition revoked, while a record is still failing: leave it for
    the next owner."""


class Outcome(enum.Enum):
    """What became of a record the policy processed."""

    APPLIED = "applied"  # its transaction committed (a duplicate counts: applied before)
    SKIPPED = "skipped"
    DEAD_LETTERED = "dead_lettered"


class Outcomes(Protocol):
    """Where the policy reports what happened (stats and metrics of the source)."""

    def applied(self, topic: str, elapsed_s: float, events: int = 1) -> None: ...
    def duplicate(self, topic: str, elapsed_s: float, events: int = 1) -> None: ...
    def transient_failure(self) -> None: ...
    def handler_failure(self) -> None: ...
    def skipped(self) -> None: ...


class DeadLetterSink(Protocol):
    async def send(self, record: SourceRecord, error: BaseException) -> None:
        """Put the record where dead letters go; returns once it is there for good."""
        ...


class Ownership(Protocol):
    """Whether the source still owns a partition; `revoking` is set while it gives some
    up, waking the back-offs."""

    @property
    def revoking(self) -> asyncio.Event: ...
    def taking(self, tp: TopicPartition) -> bool: ...


@dataclass(frozen=True)
class Prepared:
    """A decoded record with its handler: ready to apply."""

    record: SourceRecord
    event: ConsumedEvent
    registration: Registration

    @property
    def size(self) -> int:
        return len(self.record.value or b"") + len(self.record.key or b"")

    def job(self) -> Job:
        event_id = str(self.event.event_id) if self.event.event_id is not None else None
        reg = self.registration
        return Job(event_id, self.event, reg.fn, bulk=reg.bulk)


@dataclass(frozen=True)
class Settle:
    """A record not to apply: dead-letter it (error) or skip it (None)."""

    record: SourceRecord
    error: PoisonRecord | None


class ApplyPolicy:
    def __init__(
        self,
        app: ConsumerApp,
        *,
        supervisor: Supervisor,
        observer: Outcomes,
        dead_letters: DeadLetterSink,
        offsets: Ownership,
    ) -> None:
        self.app = app
        self.settings = app.settings
        self._sup = supervisor
        self._observer = observer
        self._dead_letters = dead_letters
        self._offsets = offsets
        self._debezium = DebeziumHeaders(
            self.settings.debezium_id_header, self.settings.debezium_type_header
        )

    def holding(self, tp: TopicPartition) -> bool:
        """Whether work on the partition may go on: not stopping, not being revoked."""
        return not self._sup.stopping.is_set() and self._offsets.taking(tp)

    async def process(self, record: SourceRecord) -> Outcome:
        """Apply the record, or settle it otherwise (skipped, dead-lettered).

        Raises Abandon when the consumer stops, or the partition goes, while the record is
        still failing."""
        found = self.examine(record)
        if isinstance(found, Settle):
            return await self.settle(found)
        return await self.apply_one(found)

    def examine(self, record: SourceRecord) -> Prepared | Settle:
        """What to do with the record; nothing done yet."""
        s = self.settings
        try:
            event = decode(record, self._debezium)
        except PoisonRecord as exc:
            return Settle(record, exc)
        except Exception as exc:  # decode wraps what it raises; this guards the rest
            return Settle(
                record,
                PoisonRecord(f"cannot be decoded: {first_line(exc)}", PoisonReason.UNDECODABLE),
            )
        if event.event_id is None and s.missing_event_id != "process":
            if s.missing_event_id == "dead_letter":
                return Settle(
                    record, PoisonRecord("record has no event_id header", PoisonReason.NO_EVENT_ID)
                )
            return Settle(record, None)
        registration = self.app.find(event.topic, event.event_type)
        if registration is None:
            if s.unhandled == "dead_letter":
                return Settle(
                    record,
                    PoisonRecord(f"no handler for {event.event_type!r}", PoisonReason.NO_HANDLER),
                )
            return Settle(record, None)
        return Prepared(record, event, registration)

    async def settle(self, settle: Settle) -> Outcome:
        if settle.error is None:
            self._observer.skipped()
            return Outcome.SKIPPED
        await self._dead_letters.send(settle.record, settle.error)
        return Outcome.DEAD_LETTERED

    async def apply_one(self, item: Prepared) -> Outcome:
        """Apply one record in a transaction of its own, retrying; dead-letter it after
        max_attempts handler failures."""
        record, s = item.record, self.settings
        tp = TopicPartition(record.topic, record.partition)
        failures = 0
        backoff = self._backoff_of()
        while True:
            work = Work(s.group_id, [item.job()])
            try:
                await self._attempt(work, [item])
                return Outcome.APPLIED
            except Exception as exc:
                if is_transient(exc):
                    self._transient(exc, record)
                else:
                    failures += 1
                    self._observer.handler_failure()
                    if failures >= s.max_attempts:
                        await self._dead_letters.send(record, exc)
                        return Outcome.DEAD_LETTERED
                    log.warning(
                        "handler failed; retrying",
                        extra={
                            "offset": record.offset,
                            "attempt": failures,
                            "error": first_line(exc),
                        },
                    )
                await self._backoff(tp, backoff, exc)

    async def apply_batch(self, items: list[Prepared]) -> bool:
        """Apply the records in one transaction, retrying transient failures; False (all
        rolled back) when a handler failed: re-apply them one at a time."""
        record = items[0].record
        tp = TopicPartition(record.topic, record.partition)
        backoff = self._backoff_of()
        while True:
            work = Work(self.settings.group_id, [item.job() for item in items])
            try:
                await self._attempt(work, items)
                return True
            except Exception as exc:
                if not is_transient(exc):
                    log.info(
                        "a handler failed in a batch; applying its records one at a time",
                        extra={
                            "topic": record.topic,
                            "offset": record.offset,
                            "error": first_line(exc),
                        },
                    )
                    return False
                self._transient(exc, record)
                await self._backoff(tp, backoff, exc)

    async def _attempt(self, work: Work, items: list[Prepared]) -> None:
        started = time.perf_counter()
        await self.app.database.apply_work(work)
        # One transaction's time, shared by its events (a batch's cost per event); counted
        # per topic and outcome, not per event: metrics per event cost as much as a handler.
        elapsed = (time.perf_counter() - started) / len(items)
        outcomes = Counter(
            (item.record.topic, applied) for item, applied in zip(items, work.applied, strict=True)
        )
        for (topic, applied), events in outcomes.items():
            if applied:
                self._observer.applied(topic, elapsed, events)
            else:
                self._observer.duplicate(topic, elapsed, events)

    def _transient(self, exc: Exception, record: SourceRecord) -> None:
        self._observer.transient_failure()
        log.warning(
            "transient failure; retrying",
            extra={"topic": record.topic, "offset": record.offset, "error": first_line(exc)},
        )

    def _backoff_of(self) -> Backoff:
        return Backoff(self.settings.backoff_base_s, self.settings.backoff_max_s)

    async def _backoff(self, tp: TopicPartition, backoff: Backoff, exc: Exception) -> None:
        """Sleep before the next try, cut short by stopping or a revocation; raises Abandon
        when the partition's work must stop."""
        if not self.holding(tp):
            raise Abandon from exc
        revoking = self._offsets.revoking
        # Woken by a revocation that starts meanwhile; one already under way (of other
        # partitions: aiokafka revokes all at once) would wake it at once, every time.
        await self._sup.sleep(backoff.next_s(), *(() if revoking.is_set() else (revoking,)))
        if not self.holding(tp):
            raise Abandon from exc
