"""The relay service: a thin loop around publish_batch, with named, supervised side tasks.

Tasks:
- `leases`: heartbeat, renew, rebalance; starts and stops shard workers.
- `shard-N`: one per held shard; calls publish_batch while batches come back full,
  backs off to idle_interval_s when empty, wakes early on a NOTIFY hint.
- `purge`: retention of published rows and old idempotency keys.
- `notify`: optional LISTEN connection on Postgres (reconnects when it dies).
- `gauges`: refreshes the backlog gauges (pending, parked, oldest age) periodically, so a
  Prometheus scrape never queries the database.

Shutdown has one recipe (`_shutdown`): stop claiming, let in-flight batches finish
within shutdown_grace_s, release leases, leave the membership, close Kafka and the DB.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)

from relay.batch import BatchOutcome, KafkaUnavailable, publish_batch
from relay.config import RelaySettings
from relay.errors import LeaseLost, PublishFailed, RelayError, StoreUnavailable
from relay.http import OpsServer, Probe
from relay.leases import heartbeat
from relay.metrics import RelayMetrics
from relay.preflight import check_database
from relay.publisher import KafkaPublisher, Publisher
from relay.store import Store

log = logging.getLogger("relay")


def make_store(settings: RelaySettings) -> Store:
    db = settings.database
    if db.dialect == "postgres":
        from relay.store_postgres import PostgresStore

        return PostgresStore(db.url)
    from relay.store_sqlite import SqliteStore

    return SqliteStore(db.url, wait_for_lock=settings.sqlite_wait_for_lock)


@dataclass
class RelayStats:
    published: int = 0
    retried: int = 0
    parked: int = 0
    batches: int = 0
    lease_losses: int = 0
    takeovers: int = 0
    producer_recreations: int = 0
    kafka_outages: int = 0
    store_errors: int = 0
    last_tick: float = field(default_factory=time.monotonic)
    last_heartbeat_ok: float = 0.0  # monotonic time of the last successful lease round
    kafka_ok: bool = False  # the producer started and the last batch reached Kafka


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaUnavailable | StoreUnavailable) or (
        isinstance(exc, PublishFailed) and exc.retriable
    )


@dataclass
class _Worker:
    token: int
    task: asyncio.Task[None]
    stop: asyncio.Event
    wake: asyncio.Event


class RelayService:
    def __init__(
        self,
        settings: RelaySettings,
        *,
        store: Store | None = None,
        publisher: Publisher | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or make_store(settings)
        self.publisher = publisher or KafkaPublisher(settings)
        self.stats = RelayStats()
        self.metrics = RelayMetrics()
        self.ops: OpsServer | None = None
        self._on_batch = on_batch
        self._stopping = asyncio.Event()
        self._workers: dict[int, _Worker] = {}
        self._side: dict[str, asyncio.Task[None]] = {}
        self._publisher_lock = asyncio.Lock()
        self._publisher_generation = 0

    # ------------------------------------------------------------------ control

    @property
    def held(self) -> dict[int, int]:
        return {shard: w.token for shard, w in self._workers.items()}

    def stop(self) -> None:
        """Ask for a graceful stop (SIGTERM, SIGINT); run() returns when it is done."""
        if not self._stopping.is_set():
            log.info("stopping: no new claims; draining in-flight batches")
        self._stopping.set()

    async def run(self) -> None:
        """Start-up checks, then work until stop(); raises StartupRefused before touching anything."""
        s = self.settings
        await self.store.open()
        try:
            await check_database(self.store, s)
            if s.http_enabled:
                self.ops = OpsServer(
                    s.http_host, s.http_port, self.metrics.registry, self.healthz, self.readyz
                )
                await self.ops.start()
            # The backlog gauges matter most while Kafka is away, start-up included.
            self._spawn("gauges", self._gauges_loop)
            await self._retry("kafka start", self.publisher.start)
            if self._stopping.is_set():
                return
            self.stats.kafka_ok = True
            log.info(
                "relay started",
                extra={"replica": s.replica_id, "shards": s.shard_count, "db": self.store.dialect},
            )
            self._spawn("leases", self._lease_loop)
            self._spawn("purge", self._purge_loop)
            if s.listen_notify and self.store.dialect == "postgres":
                self._spawn("notify", self._notify_loop)
            await self._stopping.wait()
        finally:
            await self._shutdown()

    # ------------------------------------------------------------------ supervision

    def _spawn(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        async def supervised() -> None:
            while not self._stopping.is_set():
                try:
                    await body()
                    return
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("task failed; restarting in 1s", extra={"task": name})
                    await self._sleep(1.0)

        self._side[name] = asyncio.create_task(supervised(), name=name)

    async def _sleep(self, seconds: float, *extra: asyncio.Event) -> None:
        """Sleep, returning early when stopping (or when any extra event is set)."""
        events = [self._stopping, *extra]
        waits = [asyncio.create_task(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _retry(self, what: str, call: Callable[[], Awaitable[None]]) -> None:
        """Transport retries: exponential backoff with jitter, retriable errors only."""

        def log_retry(state: RetryCallState) -> None:
            # Retrying is the loop at work: /healthz stays green while Kafka is away at
            # start-up (liveness must not restart a relay for a broker outage).
            self.stats.last_tick = time.monotonic()
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                f"{what} failed; retrying",
                extra={"attempt": state.attempt_number, "error": str(exc)},
            )

        async def sleep(seconds: float) -> None:
            await self._sleep(seconds)

        retrying = AsyncRetrying(
            retry=retry_if_exception(_retriable),
            wait=wait_random_exponential(multiplier=0.2, max=10),
            stop=lambda _state: self._stopping.is_set(),
            sleep=sleep,
            before_sleep=log_retry,
            reraise=True,
        )
        with contextlib.suppress(KafkaUnavailable, StoreUnavailable, PublishFailed):
            async for attempt in retrying:
                with attempt:
                    await call()

    # ------------------------------------------------------------------ leases

    async def _lease_loop(self) -> None:
        s = self.settings
        while not self._stopping.is_set():
            try:
                changes = await heartbeat(
                    self.store,
                    me=s.replica_id,
                    held=self.held,
                    shard_count=s.shard_count,
                    ttl_s=s.lease_ttl_s,
                    accepting=not self._stopping.is_set(),
                )
            except StoreUnavailable as exc:
                self.stats.store_errors += 1
                log.warning("lease heartbeat failed", extra={"error": str(exc)})
                await self._sleep(s.heartbeat_interval_s)
                continue
            self.stats.last_tick = self.stats.last_heartbeat_ok = time.monotonic()
            self.metrics.replicas.set(len(changes.replicas))
            for shard in changes.lost:
                self.stats.lease_losses += 1
                self.metrics.losses.inc()
                log.warning("lease lost; shard worker stopped", extra={"shard": shard})
                self._drop_worker(shard, cancel=True)
            for shard in changes.to_release:
                self._spawn(f"release-{shard}", lambda shard=shard: self._hand_over(shard))  # type: ignore[misc]
            for shard, token in changes.acquired.items():
                if token > 1:
                    self.stats.takeovers += 1
                    self.metrics.takeovers.inc()
                log.info("lease acquired", extra={"shard": shard, "token": token})
                self._start_worker(shard, token)
            self.metrics.leases_held.set(len(self._workers))
            await self._sleep(s.heartbeat_interval_s)

    def _start_worker(self, shard: int, token: int) -> None:
        stop, wake = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            self._shard_loop(shard, token, stop, wake), name=f"shard-{shard}"
        )
        self._workers[shard] = _Worker(token, task, stop, wake)

    def _drop_worker(self, shard: int, *, cancel: bool) -> _Worker | None:
        worker = self._workers.pop(shard, None)
        if worker is not None:
            worker.stop.set()
            if cancel:
                worker.task.cancel()
        return worker

    async def _hand_over(self, shard: int) -> None:
        """Rebalance: finish the current batch, then release the shard for its new owner."""
        worker = self._workers.get(shard)
        if worker is None:
            return
        worker.stop.set()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await worker.task
        if self._workers.get(shard) is worker:
            del self._workers[shard]
            with contextlib.suppress(RelayError):
                await self.store.lease_release(shard, self.settings.replica_id, worker.token)
            log.info("lease released for rebalance", extra={"shard": shard})

    # ------------------------------------------------------------------ shard work

    async def _shard_loop(
        self, shard: int, token: int, stop: asyncio.Event, wake: asyncio.Event
    ) -> None:
        s = self.settings
        delay = s.poll_interval_s
        while not (self._stopping.is_set() or stop.is_set()):
            try:
                outcome = await self._run_once_with_retry(shard, token, stop)
            except LeaseLost:
                self.stats.lease_losses += 1
                self.metrics.losses.inc()
                log.warning("fenced write refused: lease lost", extra={"shard": shard})
                if self._workers.get(shard) is not None and self._workers[shard].token == token:
                    del self._workers[shard]
                return
            except (KafkaUnavailable, StoreUnavailable, PublishFailed):
                return  # only raised once stopping; nothing was settled, rows stay pending
            except Exception:
                log.exception("shard batch failed unexpectedly", extra={"shard": shard})
                await self._sleep(1.0, stop)
                continue
            if outcome.full:
                delay = s.poll_interval_s
                continue
            delay = s.poll_interval_s if outcome.claimed else min(delay * 2, s.idle_interval_s)
            wake.clear()
            await self._sleep(delay, stop, wake)

    async def _run_once_with_retry(
        self, shard: int, token: int, stop: asyncio.Event
    ) -> BatchOutcome:
        result: BatchOutcome | None = None

        async def once() -> None:
            nonlocal result
            # The producer this attempt uses: a failure seen after another worker already
            # replaced it must not replace the new one too.
            generation = self._publisher_generation
            try:
                result = await self.run_once(shard, token)
            except KafkaUnavailable as exc:
                self.stats.kafka_outages += 1
                self.stats.kafka_ok = False
                self.metrics.kafka_outages.inc()
                if exc.error.fatal:
                    await self._recreate_publisher(generation)
                raise
            except StoreUnavailable:
                self.stats.store_errors += 1
                raise

        await self._retry(f"shard {shard} batch", once)
        if result is None:
            raise KafkaUnavailable(
                PublishFailed("stopped while Kafka or the database was unavailable", retriable=True)
            )
        return result

    async def run_once(self, shard: int, token: int) -> BatchOutcome:
        """One claim-publish-settle step on one shard; returns what it did."""
        generation = self._publisher_generation
        outcome = await publish_batch(
            shard, token, store=self.store, publisher=self.publisher, settings=self.settings
        )
        self._observe(outcome)
        if outcome.parked:
            log.warning("rows parked", extra={"shard": shard, "count": outcome.parked})
        if outcome.fatal_producer_error:
            await self._recreate_publisher(generation)
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    def _observe(self, outcome: BatchOutcome) -> None:
        st, m = self.stats, self.metrics
        st.batches += 1
        st.published += outcome.published
        st.retried += outcome.retried
        st.parked += outcome.parked
        st.last_tick = time.monotonic()
        if outcome.claimed:
            m.batch_size.observe(outcome.claimed)
        if outcome.published:
            st.kafka_ok = True
        for topic, count in outcome.published_by_topic.items():
            m.published.labels(topic=topic).inc(count)
        for reason, count in outcome.failures_by_reason.items():
            m.failures.labels(reason=reason).inc(count)
        if outcome.parked:
            m.parked.inc(outcome.parked)
        for latency in outcome.latencies_s:
            m.latency.observe(latency)

    # ------------------------------------------------------------------ health

    def healthz(self) -> Probe:
        """Alive: the loops tick (lease rounds, batches, retries) at least every
        max(3 heartbeats, 30s). A Kafka or database outage does not fail it."""
        s = self.settings
        quiet = time.monotonic() - self.stats.last_tick
        # Retry waits reach 10s (tenacity, max=10) plus the attempt itself: 30s is no false alarm.
        limit = max(3 * s.heartbeat_interval_s, 30.0)
        if quiet > limit:
            return Probe(False, f"no loop tick for {quiet:.1f}s (limit {limit:.0f}s)")
        return Probe(True, "ok")

    def readyz(self) -> Probe:
        """Ready: database and Kafka reachable, leases held or being waited for."""
        s = self.settings
        problems = []
        since = time.monotonic() - self.stats.last_heartbeat_ok
        if not self.stats.last_heartbeat_ok or since > s.lease_ttl_s:
            problems.append("database: no successful lease round recently")
        if not self.stats.kafka_ok:
            problems.append("kafka: unreachable or not started")
        if self._stopping.is_set():
            problems.append("stopping")
        if problems:
            return Probe(False, "; ".join(problems))
        return Probe(True, f"ok: {len(self._workers)} shard(s) held")

    async def _gauges_loop(self) -> None:
        s, m = self.settings, self.metrics
        while not self._stopping.is_set():
            try:
                backlog = await self.store.backlog(s.shard_count)
                m.pending.set(backlog.pending)
                m.parked_rows.set(backlog.parked)
                m.oldest_pending_age.set(backlog.oldest_pending_age_s)
            except StoreUnavailable as exc:
                log.debug("gauge refresh failed", extra={"error": str(exc)})
            await self._sleep(s.gauges_interval_s)

    async def _recreate_publisher(self, seen_generation: int) -> None:
        async with self._publisher_lock:
            if seen_generation != self._publisher_generation:
                return  # another worker already replaced it
            log.warning("kafka producer failed fatally; recreating it")
            self.stats.producer_recreations += 1
            self.metrics.recreations.inc()
            await self._retry("kafka producer recreate", self.publisher.recreate)
            self._publisher_generation += 1

    # ------------------------------------------------------------------ side tasks

    async def _purge_loop(self) -> None:
        s = self.settings
        while not self._stopping.is_set():
            try:
                while not self._stopping.is_set():
                    removed = await self.store.purge(
                        s.retention_period_s if s.retention == "keep" else 0.0,
                        s.idempotency_retention_s,
                        s.purge_batch_size,
                    )
                    if removed < s.purge_batch_size:
                        break
                    if removed:
                        log.debug("purged", extra={"rows": removed})
            except StoreUnavailable as exc:
                log.warning("purge failed", extra={"error": str(exc)})
            await self._sleep(s.purge_interval_s)

    async def _notify_loop(self) -> None:
        from relay.notify import listen

        def woken(shard: int | None) -> None:
            targets = (
                self._workers.values()
                if shard is None
                else [self._workers[shard]]
                if shard in self._workers
                else []
            )
            for worker in targets:
                worker.wake.set()

        await listen(self.settings, self._stopping, woken, self._sleep)

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        self._stopping.set()
        s = self.settings
        workers = dict(self._workers)
        tasks = [w.task for w in workers.values()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=s.shutdown_grace_s)
            for task in pending:
                task.cancel()  # unsettled rows stay pending: republished later, never lost
            if pending:
                log.warning(
                    "grace period over; abandoned in-flight batches", extra={"count": len(pending)}
                )
                await asyncio.wait(pending, timeout=5)
        for name, task in self._side.items():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            log.debug("task stopped", extra={"task": name})
        for shard, worker in workers.items():
            with contextlib.suppress(RelayError):
                await self.store.lease_release(shard, s.replica_id, worker.token)
        self._workers.clear()
        with contextlib.suppress(RelayError):
            await self.store.replica_remove(s.replica_id)
        await self.publisher.stop()
        await self.store.close()
        if self.ops is not None:
            await self.ops.stop()
        log.info(
            "relay stopped", extra={"published": self.stats.published, "parked": self.stats.parked}
        )
