"""The consumer: apply each event exactly once, commit the Kafka offset only after the DB.

For each partition's records of a fetch, in order: decode them; in one database transaction
per batch insert the (group, event_id) pairs into processed_events and run the handlers
(duplicates skip theirs); commit; only then are the offsets eligible for the Kafka commit.
Transient failures (the database or Kafka briefly away) are retried with backoff and
nothing past them is committed. A record that cannot be decoded, or whose handler still
fails after max_attempts, goes to the dead-letter topic with where it came from and the
error in its headers, and then counts as done. One bad record never stops the consumer.

This module runs the loop; the pieces are batch_apply (a partition's records in batches),
apply (what becomes of a record or a batch), work (one transaction's events), offsets
(the done-map, commits, revocation), dead_letters, observer (stats and metrics) and
outbox_core.supervisor (sleeping, retrying, side tasks, liveness).

Operations: Prometheus metrics on a registry per Consumer (consumer_lib.metrics), served
with /healthz and /readyz when `http_port` is set; with OpenTelemetry installed, each
attempt runs in a CONSUMER span whose parent is the emitting code's span
(consumer_lib.tracing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from consumer_lib.app import ConsumerApp
from consumer_lib.apply import ApplyPolicy
from consumer_lib.batch_apply import PartitionApply
from consumer_lib.dead_letters import DeadLetters
from consumer_lib.errors import ConsumerConfigError, is_transient, kafka_retriable
from consumer_lib.event import ConsumedEvent
from consumer_lib.observer import ConsumerObserver, ConsumerStats
from consumer_lib.offsets import Offsets
from consumer_lib.settings import ConsumerSettings, MissingIdPolicy, kafka_options
from outbox_core.driver_errors import first_line
from outbox_core.kafka_clients import stop_consumer
from outbox_core.ops_http import OpsServer, Probe
from outbox_core.periodic import every
from outbox_core.supervisor import Supervisor

log = logging.getLogger("consumer_lib")


class Consumer:
    def __init__(self, app: ConsumerApp) -> None:
        if not app.topics:
            raise ConsumerConfigError("register at least one handler before running")
        self.app = app
        self.settings = app.settings
        self.observer = ConsumerObserver()
        self.stats = self.observer.stats
        self.metrics = self.observer.metrics
        self.supervisor = Supervisor(log)
        self.ops: OpsServer | None = None
        self._kafka: AIOKafkaConsumer | None = None
        self._offsets: Offsets | None = None
        self._dead_letters: DeadLetters | None = None

    def stop(self) -> None:
        self.supervisor.stop()

    # ------------------------------------------------------------------ health

    def healthz(self) -> Probe:
        """Alive: the fetch loop (or the record being processed) ticked recently, and no
        partition is stuck (its dead-letter send refused for longer than stall_after_s)."""
        stuck = (
            self._dead_letters.stuck(self.settings.stall_after_s) if self._dead_letters else None
        )
        if stuck is not None:
            return Probe(False, f"stuck: {stuck}")
        return self.supervisor.healthz(self.settings.stall_after_s)

    def readyz(self) -> Probe:
        """Ready: Kafka reachable (started, last fetch fine) and the database answering."""
        problems = []
        if not self.observer.kafka_ok:
            problems.append("kafka: unreachable or not started")
        if not self.observer.db_ok:
            problems.append("database: the last transaction failed transiently")
        if self.supervisor.stopping.is_set():
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

    async def _run(self) -> None:
        s, sup = self.settings, self.supervisor
        kafka = self._kafka = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,  # forced: offsets follow the database, never a timer
            auto_offset_reset="earliest",
            isolation_level=s.isolation_level,
            **kafka_options(s),
        )
        dead_letters = self._dead_letters = DeadLetters(
            s,
            self.app.topics,
            supervisor=sup,
            observer=self.observer,
            database=self.app.database,
            transient=is_transient,
        )
        try:
            await sup.retry("kafka start", kafka.start, kafka_retriable)
            await dead_letters.start()
        except BaseException:
            await stop_consumer(kafka)
            await dead_letters.stop()
            raise
        offsets = self._offsets = Offsets(kafka, self.observer)
        policy = ApplyPolicy(
            self.app,
            supervisor=sup,
            observer=self.observer,
            dead_letters=dead_letters,
            offsets=offsets,
        )
        partition = PartitionApply(policy, offsets, sup)
        kafka.subscribe(self.app.topics, listener=offsets.listener())
        self.observer.kafka_reachable(True)
        sup.spawn(
            "purge", lambda: every(sup, s.purge_interval_s, self._purge, failed=_purge_failed)
        )
        sup.spawn(
            "lag", lambda: every(sup, s.lag_interval_s, self._refresh_lag, failed=_lag_failed)
        )
        log.info("consumer started", extra={"group": s.group_id, "topics": self.app.topics})
        try:
            while not sup.stopping.is_set():
                sup.tick()
                try:
                    batch = await kafka.getmany(timeout_ms=500, max_records=s.max_records)
                except KafkaError as exc:
                    self.observer.kafka_reachable(False)
                    log.warning("fetch failed; retrying", extra={"error": str(exc)})
                    await sup.sleep(1.0)
                    continue
                self.observer.kafka_reachable(True)
                if batch:
                    async with offsets.round:
                        await self._within_grace(self._process_round(batch, offsets, partition))
        finally:
            await sup.cancel_all()
            await offsets.commit(None)
            await stop_consumer(kafka)
            await dead_letters.stop()
            await self.app.database.close()
            log.info("consumer stopped", extra={"processed": self.stats.processed})

    # ------------------------------------------------------------------ processing

    async def _within_grace(self, work: Coroutine[Any, Any, None]) -> None:
        """Run one round; once stop() is called it has shutdown_grace_s to finish the records
        in flight, then it is cancelled: their transactions roll back and, not being done,
        their offsets stay uncommitted for the next owner."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self.supervisor.stopping.wait())
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

    async def _process_round(
        self,
        batch: dict[TopicPartition, list[ConsumerRecord]],
        offsets: Offsets,
        partition: PartitionApply,
    ) -> None:
        gate = asyncio.Semaphore(self.settings.max_concurrent_partitions)

        async def one_partition(tp: TopicPartition, records: list[ConsumerRecord]) -> None:
            async with gate:
                await partition.run(tp, records)
                await offsets.commit({tp})

        await asyncio.gather(*(one_partition(tp, recs) for tp, recs in batch.items()))

    # ------------------------------------------------------------------ side tasks

    async def _refresh_lag(self) -> None:
        """Per assigned partition: highwater (from the last fetch) minus the next offset to
        process (the client's position until a record of the partition was processed)."""
        kafka, offsets = self._kafka, self._offsets
        if kafka is None or offsets is None:
            return
        assigned = kafka.assignment()
        self.observer.assigned(len(assigned))
        for tp in assigned:
            try:
                highwater = kafka.highwater(tp)
                if highwater is None:
                    continue  # nothing fetched from it yet
                known = offsets.next_to_process(tp)
                position = (
                    known
                    if known is not None
                    else int(await asyncio.wait_for(kafka.position(tp), timeout=1.0))
                )
            except (AssertionError, KafkaError, TimeoutError):
                continue  # revoked meanwhile, or no position yet
            self.observer.lag(tp, max(0, int(highwater) - int(position)))

    async def _purge(self) -> None:
        """Delete this group's processed_events rows older than retention_s, purge_batch_size
        at a time."""
        s = self.settings
        removed = s.purge_batch_size
        while removed >= s.purge_batch_size:  # a full batch: there may be more
            removed = await self.app.database.purge(s.group_id, s.retention_s, s.purge_batch_size)


def _purge_failed(exc: Exception) -> None:
    log.warning("processed_events purge failed", extra={"error": first_line(exc)})


def _lag_failed(exc: Exception) -> None:
    log.debug("lag refresh failed", extra={"error": first_line(exc)})


async def run_consumer(app: ConsumerApp, *, install_signals: bool = True) -> Consumer:
    """Run until SIGTERM/SIGINT (or consumer.stop()); returns the stopped consumer.

    install_signals=False leaves the signals to whoever owns the process (a web server);
    inside an application's lifespan, `consumer_in_background` is the shorter path."""
    import signal

    consumer = Consumer(app)
    if install_signals:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, consumer.stop)
    await consumer.run()
    return consumer


@contextlib.asynccontextmanager
async def consumer_in_background(
    app: ConsumerApp, *, stop_timeout_s: float | None = None
) -> AsyncIterator[Consumer]:
    """Runs the consumer as a task of the running loop for the length of the block, with
    no signal handlers of its own: for an application's lifespan, where the server owns
    SIGTERM and SIGINT. Leaving the block stops it as SIGTERM would (in-flight records get
    shutdown_grace_s) and waits for it; a consumer that stopped by itself with an error
    raises that error there.

        @contextlib.asynccontextmanager
        async def lifespan(api: FastAPI) -> AsyncIterator[None]:
            async with consumer_in_background(consumers):
                yield
    """
    consumer = Consumer(app)
    task = asyncio.create_task(consumer.run(), name=f"outbox-consumer {app.settings.group_id}")
    try:
        yield consumer
    finally:
        consumer.stop()
        timeout = (
            stop_timeout_s if stop_timeout_s is not None else app.settings.shutdown_grace_s + 30
        )
        await asyncio.wait_for(task, timeout)


__all__ = [
    "ConsumedEvent",
    "Consumer",
    "ConsumerApp",
    "ConsumerSettings",
    "ConsumerStats",
    "MissingIdPolicy",
    "consumer_in_background",
    "run_consumer",
]
