"""The replica's work loop: one cycle claims for every shard it holds in one statement,
publishes what came back, and settles it in one statement (batch.publish_batch).

One loop instead of a task per shard: at a steady trickle a cycle carries every shard's
new rows in three round trips (claim, send, settle), where per-shard workers paid three
per shard. An empty claim is the probe: while rows come a cycle starts every
probe_interval_s, at once after a shard came back full, and every probe_idle_interval_s
once nothing was found for probe_idle_after_s (wakeup.py); a NOTIFY hint wakes it early.
Rows held back behind a failing row of their key are not claimed at all (the claim's
NOT EXISTS), so nothing spins on them.

Leases come and go between cycles (leases.py calls start, drop, hand_over); a cycle
settles with the tokens it claimed with, fenced per shard in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from outbox_core.supervisor import Supervisor
from relay.batch import BatchOutcome, BatchRules, publish_batch
from relay.errors import KafkaUnavailable, PublishFailed, RelayError, StoreUnavailable
from relay.observer import RelayObserver
from relay.producer_keeper import ProducerKeeper, retriable
from relay.store import Store
from relay.wakeup import ProbeSettings

log = logging.getLogger("relay.cycle")


class Cycle:
    def __init__(
        self,
        pacing: ProbeSettings,
        rules: BatchRules,
        *,
        store: Store,
        producer: ProducerKeeper,
        observer: RelayObserver,
        supervisor: Supervisor,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> None:
        self.pacing = pacing
        self.rules = rules
        self._store = store
        self._producer = producer
        self._observer = observer
        self._sup = supervisor
        self._on_batch = on_batch
        self._shards: dict[int, int] = {}  # shard -> token: claimed for
        self._leaving: dict[int, int] = {}  # handed over once the cycle in flight settles
        self._wake = asyncio.Event()
        self._between = asyncio.Event()  # set while no cycle is in flight
        self._between.set()
        self.cycles = 0  # cycles run, empty ones included (what an idle relay costs)

    @property
    def held(self) -> dict[int, int]:
        """Every lease this replica holds, shards being handed over included."""
        return {**self._shards, **self._leaving}

    def start(self, shard: int, token: int) -> None:
        self._shards[shard] = token
        self._wake.set()

    def drop(self, shard: int) -> None:
        """The lease is gone: claim no more for it (a settle in flight is fenced)."""
        self._shards.pop(shard, None)
        self._leaving.pop(shard, None)

    async def hand_over(self, shard: int) -> None:
        """Rebalance: claim no more for the shard, let the cycle in flight settle its
        rows, then release the lease for its new owner."""
        token = self._shards.pop(shard, None)
        if token is None:
            return
        self._leaving[shard] = token
        await self._between.wait()
        if self._leaving.pop(shard, None) == token:
            with contextlib.suppress(RelayError):
                await self._store.lease_release(shard, self.rules.owner, token)
            log.info("lease released for rebalance", extra={"shard": shard})

    def wake(self, shard: int | None = None) -> None:
        """A hint that rows are waiting (on shard, or on any): start the next cycle now."""
        if shard is None or shard in self._shards:
            self._wake.set()

    async def drain(self, grace_s: float) -> dict[int, int]:
        """Shutdown (stopping is set, so no cycle starts): let the cycle in flight settle
        within grace_s; returns the leases held. Rows of a cycle cut short stay pending:
        republished later, never lost."""
        held = self.held
        try:
            await asyncio.wait_for(self._between.wait(), grace_s)
        except TimeoutError:
            log.warning("grace period over; abandoned the cycle in flight")
        self._shards.clear()
        self._leaving.clear()
        return held

    async def run_once(self) -> BatchOutcome:
        """One claim-publish-settle cycle over the held shards; returns what it did."""
        tokens = dict(self._shards)
        if not tokens:
            return BatchOutcome(0)
        generation = self._producer.generation
        self._between.clear()
        try:
            outcome = await publish_batch(
                tokens, store=self._store, publisher=self._producer.publisher, rules=self.rules
            )
        finally:
            self._between.set()
        self.cycles += 1
        self._sup.tick()
        self._observer.batch(outcome)
        for shard in outcome.lost:
            self._observer.lease_lost()
            log.warning("fenced write refused: lease lost", extra={"shard": shard})
            if self._shards.get(shard) == tokens[shard]:
                del self._shards[shard]
        if outcome.parked:
            log.warning("rows parked", extra={"count": outcome.parked})
        if outcome.fatal_producer_error:
            await self._producer.recreate(generation)
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    async def _attempt(self) -> BatchOutcome:
        # The producer this attempt uses: a failure seen after it was already replaced
        # must not replace the new one too.
        generation = self._producer.generation
        try:
            return await self.run_once()
        except KafkaUnavailable as exc:
            self._observer.kafka_outage()
            if exc.error.fatal:
                await self._producer.recreate(generation)
            raise
        except StoreUnavailable:
            self._observer.store_error()
            raise

    async def run(self) -> None:
        pacing = self.pacing
        last_rows = time.monotonic()
        while not self._sup.stopping.is_set():
            started = time.monotonic()
            self._wake.clear()
            try:
                outcome = await self._sup.retry("relay cycle", self._attempt, retriable)
            except (KafkaUnavailable, StoreUnavailable, PublishFailed):
                return  # raised only once stopping; nothing was settled, rows stay pending
            except Exception:
                log.exception("relay cycle failed unexpectedly")
                await self._sup.sleep(1.0)
                continue
            if outcome.claimed:
                last_rows = started
                if outcome.full:
                    continue
            quiet = started - last_rows > pacing.idle_after_s
            interval = pacing.idle_interval_s if quiet else pacing.interval_s
            await self._sup.sleep(max(0.0, interval - (time.monotonic() - started)), self._wake)
