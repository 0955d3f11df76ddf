"""The shard workers: one task per held shard, each calling publish_batch in a loop.

A worker claims again at once while batches come back full; otherwise it waits to be
woken (by the probe in wakeup.py, or a NOTIFY hint), or idle_interval_s at the longest.
`run_once` is one step of one shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field, model_validator

from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.batch import BatchOutcome, BatchRules, publish_batch
from relay.errors import KafkaUnavailable, LeaseLost, PublishFailed, RelayError, StoreUnavailable
from relay.observer import RelayObserver
from relay.producer_keeper import ProducerKeeper, retriable
from relay.store import Store

log = logging.getLogger("relay.shards")


class PollSettings(SettingsGroup):
    poll_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="After a wake-up that found nothing to claim (rows held back behind a "
        "failing row of their key), how long the shard is not woken again; doubles up to "
        "idle_interval_s.",
    )
    idle_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Longest wait between claims of a shard nobody woke (rows whose "
        "backoff or delay ran out are found by it).",
    )

    @model_validator(mode="after")
    def _intervals(self) -> PollSettings:
        if self.poll_interval_s > self.idle_interval_s:
            raise ValueError(
                "poll_interval_s (OUTBOX_POLL_INTERVAL_S) must not exceed "
                "idle_interval_s (OUTBOX_IDLE_INTERVAL_S)"
            )
        return self


@dataclass
class _Worker:
    token: int
    task: asyncio.Task[None]
    stop: asyncio.Event
    wake: asyncio.Event
    waiting: bool = False  # between claims, waiting to be woken
    claims: int = 0  # claims begun: a probe asked before the latest one is stale
    quiet_until: float = 0.0  # monotonic time before which probes do not wake it


class ShardWorkers:
    def __init__(
        self,
        poll: PollSettings,
        rules: BatchRules,
        *,
        store: Store,
        producer: ProducerKeeper,
        observer: RelayObserver,
        supervisor: Supervisor,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> None:
        self.poll = poll
        self.rules = rules
        self._store = store
        self._producer = producer
        self._observer = observer
        self._sup = supervisor
        self._on_batch = on_batch
        self._workers: dict[int, _Worker] = {}
        self.last_rows_at = 0.0  # monotonic time a claim last returned rows

    @property
    def held(self) -> dict[int, int]:
        return {shard: w.token for shard, w in self._workers.items()}

    def start(self, shard: int, token: int) -> None:
        stop, wake = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(self._loop(shard, token, stop, wake), name=f"shard-{shard}")
        self._workers[shard] = _Worker(token, task, stop, wake)

    def drop(self, shard: int) -> None:
        """The lease is gone: stop the worker at once (its batch is not settled)."""
        worker = self._workers.pop(shard, None)
        if worker is not None:
            worker.stop.set()
            worker.task.cancel()

    async def hand_over(self, shard: int) -> None:
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
                await self._store.lease_release(shard, self.rules.owner, worker.token)
            log.info("lease released for rebalance", extra={"shard": shard})

    def waiting(self) -> dict[int, int]:
        """Shards whose workers wait to be woken and may be probed: shard -> claims begun."""
        now = time.monotonic()
        return {
            shard: w.claims
            for shard, w in self._workers.items()
            if w.waiting and w.quiet_until <= now
        }

    def wake_ready(self, ready: set[int], asked: dict[int, int]) -> set[int]:
        """Wake the workers of ready shards that have not claimed since the probe was asked
        (a claim begun since then saw those rows already)."""
        woken = set()
        for shard in ready:
            worker = self._workers.get(shard)
            if worker is not None and worker.waiting and worker.claims == asked.get(shard):
                worker.wake.set()
                woken.add(shard)
        return woken

    def wake(self, shard: int | None) -> None:
        """A hint that rows are waiting on shard (None: on any)."""
        if shard is None:
            targets = list(self._workers.values())
        else:
            targets = [self._workers[shard]] if shard in self._workers else []
        for worker in targets:
            worker.wake.set()

    async def drain(self, grace_s: float) -> dict[int, int]:
        """Shutdown: let in-flight batches finish within grace_s; returns what was held."""
        held = self.held
        tasks = [w.task for w in self._workers.values()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()  # unsettled rows stay pending: republished later, never lost
            if pending:
                log.warning(
                    "grace period over; abandoned in-flight batches", extra={"count": len(pending)}
                )
                await asyncio.wait(pending, timeout=5)
        self._workers.clear()
        return held

    async def run_once(self, shard: int, token: int) -> BatchOutcome:
        """One claim-publish-settle step on one shard; returns what it did."""
        generation = self._producer.generation
        outcome = await publish_batch(
            shard, token, store=self._store, publisher=self._producer.publisher, rules=self.rules
        )
        self._sup.tick()
        self._observer.batch(outcome)
        if outcome.parked:
            log.warning("rows parked", extra={"shard": shard, "count": outcome.parked})
        if outcome.fatal_producer_error:
            await self._producer.recreate(generation)
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    async def _attempt(self, shard: int, token: int) -> BatchOutcome:
        # The producer this attempt uses: a failure seen after another worker already
        # replaced it must not replace the new one too.
        generation = self._producer.generation
        try:
            return await self.run_once(shard, token)
        except KafkaUnavailable as exc:
            self._observer.kafka_outage()
            if exc.error.fatal:
                await self._producer.recreate(generation)
            raise
        except StoreUnavailable:
            self._observer.store_error()
            raise

    async def _loop(self, shard: int, token: int, stop: asyncio.Event, wake: asyncio.Event) -> None:
        poll = self.poll
        quiet = poll.poll_interval_s
        worker = self._workers[shard]
        while not (self._sup.stopping.is_set() or stop.is_set()):
            woken = wake.is_set()
            wake.clear()
            worker.waiting = False
            worker.claims += 1
            try:
                outcome = await self._sup.retry(
                    f"shard {shard} batch", lambda: self._attempt(shard, token), retriable
                )
            except LeaseLost:
                self._observer.lease_lost()
                log.warning("fenced write refused: lease lost", extra={"shard": shard})
                if self._workers.get(shard) is worker:
                    del self._workers[shard]
                return
            except (KafkaUnavailable, StoreUnavailable, PublishFailed):
                return  # raised only once stopping; nothing was settled, rows stay pending
            except Exception:
                log.exception("shard batch failed unexpectedly", extra={"shard": shard})
                await self._sup.sleep(1.0, stop)
                continue
            if outcome.claimed:
                self.last_rows_at = time.monotonic()
            if outcome.full:
                continue
            if outcome.claimed:
                quiet = poll.poll_interval_s
            elif woken:
                # Woken for rows it could not claim: they wait behind a failing row of
                # their key. Not woken again for a while, so it does not spin on them.
                worker.quiet_until = time.monotonic() + quiet
                quiet = min(quiet * 2, poll.idle_interval_s)
            worker.waiting = True
            await self._sup.sleep(poll.idle_interval_s, stop, wake)
