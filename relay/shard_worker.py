"""The shard workers: one task per held shard, each calling publish_batch in a loop.

A worker claims again at once while batches come back full, waits poll_interval_s after
a partial batch and doubles its wait up to idle_interval_s while the shard is empty; a
NOTIFY hint (wake) cuts the wait short. `run_once` is one step of one shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
        description="First wait after an empty batch; doubles up to idle_interval_s.",
    )
    idle_interval_s: float = Field(
        default=1.0, gt=0, description="Longest wait between polls of an idle shard."
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
        delay = poll.poll_interval_s
        while not (self._sup.stopping.is_set() or stop.is_set()):
            try:
                outcome = await self._sup.retry(
                    f"shard {shard} batch", lambda: self._attempt(shard, token), retriable
                )
            except LeaseLost:
                self._observer.lease_lost()
                log.warning("fenced write refused: lease lost", extra={"shard": shard})
                worker = self._workers.get(shard)
                if worker is not None and worker.token == token:
                    del self._workers[shard]
                return
            except (KafkaUnavailable, StoreUnavailable, PublishFailed):
                return  # raised only once stopping; nothing was settled, rows stay pending
            except Exception:
                log.exception("shard batch failed unexpectedly", extra={"shard": shard})
                await self._sup.sleep(1.0, stop)
                continue
            if outcome.full:
                delay = poll.poll_interval_s
                continue
            delay = (
                poll.poll_interval_s if outcome.claimed else min(delay * 2, poll.idle_interval_s)
            )
            wake.clear()
            await self._sup.sleep(delay, stop, wake)
