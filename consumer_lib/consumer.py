"""The consumer: apply each event exactly once, commit the Kafka offset only after the DB.

For every record, in partition order: decode it; in one database transaction insert
(group, event_id) into processed_events and run the handler (a duplicate skips the
handler); commit; only then is the record's offset eligible for the Kafka commit.
Transient failures (the database or Kafka briefly away) are retried with backoff and
nothing past them is committed. A record that cannot be decoded, or whose handler still
fails after max_attempts, goes to the dead-letter topic with where it came from and the
error in its headers, and then counts as done. One bad record never stops the consumer.

Operations: Prometheus metrics on a registry per Consumer (consumer_lib.metrics), served
with /healthz and /readyz when `http_port` is set; with OpenTelemetry installed, each
attempt runs in a CONSUMER span whose parent is the emitting code's span
(consumer_lib.tracing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from consumer_lib.database import Database, Handler, is_transient
from consumer_lib.errors import ConsumerConfigError, PoisonRecord
from consumer_lib.event import ConsumedEvent, decode
from consumer_lib.metrics import ConsumerMetrics
from consumer_lib.tracing import process_span
from relay.http import OpsServer, Probe
from relay.kafka_security import KafkaSecurity, KafkaSecurityError

log = logging.getLogger("consumer_lib")

MissingIdPolicy = Literal["dead_letter", "process", "skip"]


@dataclass(frozen=True)
class ConsumerSettings:
    bootstrap_servers: str
    group_id: str
    dead_letter_topic: str | None = None  # default: "<topic>.DLT"
    max_attempts: int = 5  # handler failures of one record before it is dead-lettered
    backoff_base_s: float = 0.2
    backoff_max_s: float = 10.0
    missing_event_id: MissingIdPolicy = "dead_letter"
    unhandled: Literal["skip", "dead_letter"] = "skip"
    max_concurrent_partitions: int = 4
    max_records: int = 500
    retention_s: float = 30 * 24 * 3600.0
    purge_interval_s: float = 300.0
    purge_batch_size: int = 1000
    shutdown_grace_s: float = 20.0
    client_id: str = "outbox-consumer"
    create_dead_letter_topics: bool = True  # at start, when missing (brokers rarely auto-create)
    # How to talk to Kafka; required: KafkaSecurity(protocol="SSL", ...), or
    # KafkaSecurity.plaintext() to allow an unencrypted connection explicitly.
    security: KafkaSecurity | None = None
    # Ops endpoint (/metrics, /healthz, /readyz); None: off, 0: any free port.
    http_port: int | None = None
    http_host: str = "127.0.0.1"  # 0.0.0.0 to let Prometheus scrape it from outside
    lag_interval_s: float = 5.0  # how often the lag gauges are refreshed (never per scrape)
    stall_after_s: float = 60.0  # /healthz fails when the loop has not ticked for this long

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.DLT"

    def __post_init__(self) -> None:
        if self.security is None:
            raise ConsumerConfigError(
                "choose the Kafka security: ConsumerSettings(security=KafkaSecurity(protocol="
                '"SSL" or "SASL_SSL", ...)), or security=KafkaSecurity.plaintext() to allow '
                "PLAINTEXT explicitly"
            )
        try:
            self.security.check()
        except KafkaSecurityError as exc:
            raise ConsumerConfigError(f"Kafka security: {exc}") from None
        if not self.group_id.strip():
            raise ConsumerConfigError("group_id must not be empty")
        if self.max_attempts < 1 or self.max_concurrent_partitions < 1 or self.max_records < 1:
            raise ConsumerConfigError(
                "max_attempts, max_concurrent_partitions and max_records must be at least 1"
            )
        if self.missing_event_id not in ("dead_letter", "process", "skip"):
            raise ConsumerConfigError("missing_event_id must be dead_letter, process or skip")
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise ConsumerConfigError("http_port must be in 0..65535 (or None for no endpoint)")
        if self.lag_interval_s <= 0 or self.stall_after_s <= 0:
            raise ConsumerConfigError("lag_interval_s and stall_after_s must be positive")


@dataclass
class ConsumerStats:
    processed: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    transient_retries: int = 0
    handler_failures: int = 0
    commits: int = 0
    commit_failures: int = 0
    # The most recent durations only (a long-running consumer must not grow without bound);
    # the outbox_consumer_handler_seconds histogram has them all.
    handler_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=10_000), repr=False)


class ConsumerApp:
    """Handlers by topic and event type, the database they write to, and the settings.

    app = ConsumerApp(settings, SqlAlchemyAsync(engine))

    @app.handler("orders", "OrderPlaced")
    async def on_order(event: ConsumedEvent, session: AsyncSession) -> None: ...
    """

    def __init__(self, settings: ConsumerSettings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._handlers: dict[tuple[str, str | None], Handler] = {}

    def handler(self, topic: str, event_type: str | None = None) -> Callable[[Handler], Handler]:
        """Register for one event type of a topic, or (event_type None) for all of it."""

        def register(fn: Handler) -> Handler:
            if (topic, event_type) in self._handlers:
                raise ConsumerConfigError(f"a handler for {topic}/{event_type} exists already")
            self._handlers[(topic, event_type)] = fn
            return fn

        return register

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._handlers})

    def find(self, topic: str, event_type: str | None) -> Handler | None:
        return self._handlers.get((topic, event_type)) or self._handlers.get((topic, None))


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._consumer._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("partitions assigned", extra={"partitions": sorted(str(tp) for tp in assigned)})


class Consumer:
    def __init__(self, app: ConsumerApp) -> None:
        if not app.topics:
            raise ConsumerConfigError("register at least one handler before running")
        self.app = app
        self.settings = app.settings
        self.stats = ConsumerStats()
        self.metrics = ConsumerMetrics()
        self.ops: OpsServer | None = None
        self._stopping = asyncio.Event()
        self._last_tick = time.monotonic()
        self._kafka_ok = False  # started, and the last fetch did not fail
        self._db_ok = True  # the last transaction did not fail transiently
        # Next offset to process per partition (for lag), kept until the partition goes.
        self._next: dict[TopicPartition, int] = {}
        self._kafka: AIOKafkaConsumer | None = None
        self._dlq: AIOKafkaProducer | None = None
        # Offsets whose records the database has committed (next offset to read).
        self._done: dict[TopicPartition, int] = {}
        # Partitions being revoked: their loops take no new record.
        self._revoking: set[TopicPartition] = set()
        self._round = asyncio.Lock()  # held while a getmany round is being processed

    def stop(self) -> None:
        self._stopping.set()

    # ------------------------------------------------------------------ health

    def healthz(self) -> Probe:
        """Alive: the fetch loop (or the record being processed) ticked recently."""
        quiet = time.monotonic() - self._last_tick
        limit = self.settings.stall_after_s
        if quiet > limit:
            return Probe(False, f"no loop tick for {quiet:.1f}s (limit {limit:.0f}s)")
        return Probe(True, "ok")

    def readyz(self) -> Probe:
        """Ready: Kafka reachable (started, last fetch fine) and the database answering."""
        problems = []
        if not self._kafka_ok:
            problems.append("kafka: unreachable or not started")
        if not self._db_ok:
            problems.append("database: the last transaction failed transiently")
        if self._stopping.is_set():
            problems.append("stopping")
        if problems:
            return Probe(False, "; ".join(problems))
        held = len(self._kafka.assignment()) if self._kafka is not None else 0
        return Probe(True, f"ok: {held} partition(s) assigned")

    async def run(self) -> None:
        s = self.settings
        if s.http_port is not None:
            self.ops = OpsServer(
                s.http_host, s.http_port, self.metrics.registry, self.healthz, self.readyz
            )
            await self.ops.start()
        try:
            await self._run()
        finally:
            if self.ops is not None:
                await self.ops.stop()

    def _security_options(self) -> dict[str, Any]:
        assert self.settings.security is not None  # checked in ConsumerSettings
        return self.settings.security.client_options()

    async def _run(self) -> None:
        s = self.settings
        self._kafka = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,  # forced: offsets follow the database, never a timer
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **self._security_options(),
        )
        self._dlq = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            **self._security_options(),
        )
        try:
            await self._start()
        except BaseException:
            await self._kafka.stop()
            await self._dlq.stop()
            raise
        self._kafka.subscribe(self.app.topics, listener=_Rebalance(self))
        self._kafka_ok = True
        purge = asyncio.create_task(self._purge_loop(), name="purge")
        lag = asyncio.create_task(self._lag_loop(), name="lag")
        log.info("consumer started", extra={"group": s.group_id, "topics": self.app.topics})
        try:
            while not self._stopping.is_set():
                self._last_tick = time.monotonic()
                try:
                    batch = await self._kafka.getmany(timeout_ms=500, max_records=s.max_records)
                except KafkaError as exc:
                    self._kafka_ok = False
                    log.warning("fetch failed; retrying", extra={"error": str(exc)})
                    await self._sleep(1.0)
                    continue
                self._kafka_ok = True
                if batch:
                    async with self._round:
                        await self._within_grace(self._process_round(batch))
        finally:
            for task in (purge, lag):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._commit_done(None)
            await self._kafka.stop()
            await self._dlq.stop()
            await self.app.database.close()
            log.info("consumer stopped", extra={"processed": self.stats.processed})

    # ------------------------------------------------------------------ processing

    async def _within_grace(self, work: Coroutine[Any, Any, None]) -> None:
        """Run one round; once stop() is called it has shutdown_grace_s to finish the records
        in flight, then it is cancelled: their transactions roll back and, not being done,
        their offsets stay uncommitted for the next owner."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await asyncio.wait({task}, timeout=self.settings.shutdown_grace_s)
            if not task.done():
                log.warning(
                    "records still in flight after shutdown_grace_s; abandoning them",
                    extra={"shutdown_grace_s": self.settings.shutdown_grace_s},
                )
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
            task.result()
        finally:
            stopping.cancel()
            if not task.done():  # we were cancelled ourselves
                task.cancel()

    async def _process_round(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        gate = asyncio.Semaphore(self.settings.max_concurrent_partitions)

        async def one_partition(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
            async with gate:
                for record in records:
                    if self._stopping.is_set() or tp in self._revoking:
                        break  # abandoned: not marked done, so read again by the next owner
                    try:
                        await self._process(record)
                    except _Abandon:
                        break
                    self._done[tp] = self._next[tp] = record.offset + 1
                    self._last_tick = time.monotonic()
                await self._commit_done({tp})

        await asyncio.gather(*(one_partition(tp, recs) for tp, recs in batch.items()))

    async def _process(self, record: ConsumerRecord) -> None:
        s = self.settings
        try:
            event = decode(record)
        except PoisonRecord as exc:
            await self._dead_letter(record, exc)
            return
        if event.event_id is None and s.missing_event_id != "process":
            if s.missing_event_id == "dead_letter":
                await self._dead_letter(record, PoisonRecord("record has no event_id header"))
            else:
                self.stats.skipped += 1
            return
        handler = self.app.find(event.topic, event.event_type)
        if handler is None:
            if s.unhandled == "dead_letter":
                await self._dead_letter(
                    record, PoisonRecord(f"no handler for {event.event_type!r}")
                )
            else:
                self.stats.skipped += 1
            return
        failures = 0
        delay = s.backoff_base_s
        while True:
            started = time.perf_counter()
            try:
                with process_span(event, s.group_id) as span:
                    applied = await self.app.database.apply(
                        s.group_id,
                        str(event.event_id) if event.event_id is not None else None,
                        handler,
                        event,
                    )
                    if span is not None and not applied:
                        span.set_attribute("outbox.duplicate", True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_transient(exc):
                    self._db_ok = False
                    self.stats.transient_retries += 1
                    log.warning(
                        "transient failure; retrying the record",
                        extra={
                            "topic": record.topic,
                            "offset": record.offset,
                            "error": _first_line(exc),
                        },
                    )
                else:
                    failures += 1
                    self.stats.handler_failures += 1
                    if failures >= s.max_attempts:
                        await self._dead_letter(record, exc)
                        return
                    log.warning(
                        "handler failed; retrying",
                        extra={
                            "offset": record.offset,
                            "attempt": failures,
                            "error": _first_line(exc),
                        },
                    )
                if self._stopping.is_set():
                    raise _Abandon from exc
                await self._sleep(delay)
                delay = min(delay * 2, s.backoff_max_s)
                continue
            elapsed = time.perf_counter() - started
            self._db_ok = True
            self.stats.handler_seconds.append(elapsed)
            if applied:
                self.stats.processed += 1
                self.metrics.processed.labels(topic=record.topic).inc()
                self.metrics.handler_latency.labels(topic=record.topic).observe(elapsed)
            else:
                self.stats.duplicates += 1
                self.metrics.duplicates.labels(topic=record.topic).inc()
            return

    async def _dead_letter(self, record: ConsumerRecord, error: BaseException) -> None:
        assert self._dlq is not None
        topic = self.settings.dead_letter_topic_for(record.topic)
        headers = [
            *(record.headers or ()),
            ("dlt.original.topic", record.topic.encode()),
            ("dlt.original.partition", str(record.partition).encode()),
            ("dlt.original.offset", str(record.offset).encode()),
            ("dlt.consumer.group", self.settings.group_id.encode()),
            ("dlt.error.type", type(error).__name__.encode()),
            ("dlt.error", _first_line(error)[:2000].encode()),
        ]

        async def send() -> None:
            assert self._dlq is not None
            await self._dlq.send_and_wait(topic, record.value, key=record.key, headers=headers)

        await self._retry(f"dead-letter to {topic}", send)
        self.stats.dead_lettered += 1
        self.metrics.dead_lettered.labels(topic=record.topic).inc()
        log.error(
            "record dead-lettered",
            extra={
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "to": topic,
                "error": _first_line(error),
            },
        )

    async def _start(self) -> None:
        assert self._kafka is not None
        assert self._dlq is not None
        await self._retry("kafka start", self._kafka.start)
        await self._retry("dead-letter producer start", self._dlq.start)
        if self.settings.create_dead_letter_topics:
            await self._retry("dead-letter topics", self._ensure_dead_letter_topics)

    async def _ensure_dead_letter_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.errors import TopicAlreadyExistsError

        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.settings.bootstrap_servers, **self._security_options()
        )
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            wanted = {self.settings.dead_letter_topic_for(t) for t in self.app.topics} - existing
            if wanted:
                brokers = len((await admin.describe_cluster())["brokers"])
                replicas = max(1, min(3, brokers))
                with contextlib.suppress(TopicAlreadyExistsError):
                    await admin.create_topics(
                        [
                            NewTopic(t, num_partitions=1, replication_factor=replicas)
                            for t in sorted(wanted)
                        ]
                    )
                log.info("dead-letter topics created", extra={"topics": sorted(wanted)})
        finally:
            await admin.close()

    # ------------------------------------------------------------------ offsets

    async def _commit_done(self, only: set[TopicPartition] | None) -> None:
        assert self._kafka is not None
        assigned = self._kafka.assignment()
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self._done.items()
            if (only is None or tp in only) and tp in assigned
        }
        if not offsets:
            return
        try:
            await self._kafka.commit(offsets)
            self.stats.commits += 1
            for tp, meta in offsets.items():
                if self._done.get(tp) == meta.offset:
                    del self._done[tp]
        except CommitFailedError as exc:
            # The group rebalanced under us: these partitions belong to someone else now,
            # who reads from the last committed offset; dedup absorbs the replay.
            self.stats.commit_failures += 1
            log.warning(
                "offset commit refused after a rebalance", extra={"error": _first_line(exc)}
            )
            for tp in offsets:
                self._done.pop(tp, None)
        except KafkaError as exc:
            self.stats.commit_failures += 1
            log.warning(
                "offset commit failed; will retry with the next one",
                extra={"error": _first_line(exc)},
            )

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Commit what the database committed for these partitions, then let them go."""
        self._revoking |= revoked
        async with self._round:  # the record in flight finishes; the rest is abandoned
            await self._commit_done(revoked)  # still ours until this callback returns
            for tp in revoked:
                self._done.pop(tp, None)
                self._next.pop(tp, None)
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(tp.topic, str(tp.partition))
        self._revoking -= revoked
        log.info("partitions revoked", extra={"partitions": sorted(str(tp) for tp in revoked)})

    # ------------------------------------------------------------------ plumbing

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _retry(self, what: str, call: Callable[[], Any]) -> None:
        def before_sleep(state: RetryCallState) -> None:
            # Retrying is the loop at work: /healthz stays green while Kafka is away.
            self._last_tick = time.monotonic()
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                f"{what} failed; retrying",
                extra={
                    "attempt": state.attempt_number,
                    "error": _first_line(exc) if exc is not None else "",
                },
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception(
                lambda e: isinstance(e, KafkaError | OSError) and not self._stopping.is_set()
            ),
            wait=wait_random_exponential(multiplier=0.2, max=10),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await call()

    async def _lag_loop(self) -> None:
        """Per assigned partition: highwater (from the last fetch) minus the next offset to
        process (the client's position until a record of the partition was processed)."""
        while not self._stopping.is_set():
            try:
                await self._refresh_lag()
            except Exception as exc:
                log.debug("lag refresh failed", extra={"error": _first_line(exc)})
            await self._sleep(self.settings.lag_interval_s)

    async def _refresh_lag(self) -> None:
        kafka = self._kafka
        if kafka is None:
            return
        assigned = kafka.assignment()
        self.metrics.partitions.set(len(assigned))
        for tp in assigned:
            try:
                highwater = kafka.highwater(tp)
                if highwater is None:
                    continue  # nothing fetched from it yet
                known = self._next.get(tp)
                position = (
                    known
                    if known is not None
                    else int(await asyncio.wait_for(kafka.position(tp), timeout=1.0))
                )
            except (AssertionError, KafkaError, TimeoutError):
                continue  # revoked meanwhile, or no position yet
            self.metrics.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(
                max(0, int(highwater) - int(position))
            )

    async def _purge_loop(self) -> None:
        s = self.settings
        while not self._stopping.is_set():
            try:
                while (
                    await self.app.database.purge(s.retention_s, s.purge_batch_size)
                    >= s.purge_batch_size
                ):
                    pass
            except Exception as exc:
                log.warning("processed_events purge failed", extra={"error": _first_line(exc)})
            await self._sleep(s.purge_interval_s)


class _Abandon(Exception):
    """Stopping while a record is still failing: leave it for the next run."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


async def run_consumer(app: ConsumerApp, *, install_signals: bool = True) -> Consumer:
    """Run until SIGTERM/SIGINT (or consumer.stop()); returns the stopped consumer."""
    import signal

    consumer = Consumer(app)
    if install_signals:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, consumer.stop)
    await consumer.run()
    return consumer


__all__ = ["ConsumedEvent", "Consumer", "ConsumerApp", "ConsumerSettings", "run_consumer"]
