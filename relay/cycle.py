"""The replica's work loop: one cycle claims for every shard it holds in one statement,
publishes what came back, and settles it in one statement (batch.send_batch and
settle_batch). The next cycle's claim and send run while the previous settle is in
flight: that claim leaves the previous batch's rows out, and holds back the keys whose
failure the settle is still recording, so no later row of a key goes out before an
earlier one is acked, or past an earlier one's failure.

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

from outbox_core.supervisor import Supervisor, Wake
from relay.batch import BatchOutcome, BatchRules, Sent, send_batch, settle_batch
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
        self._leaving: dict[int, int] = {}  # handed over once what was sent is settled
        self._wake = Wake()
        # The batch sent and being settled, with its number; sends are numbered as they
        # begin, and _done is the highest number whose outcome is final.
        self._settling: tuple[int, Sent, asyncio.Task[BatchOutcome]] | None = None
        self._begun = 0
        self._done = 0
        self._progress = asyncio.Condition()

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
        """Rebalance: claim no more for the shard, let what was sent for it be settled,
        then release the lease for its new owner."""
        token = self._shards.pop(shard, None)
        if token is None:
            return
        self._leaving[shard] = token
        await self._until_done(self._begun)
        if self._leaving.pop(shard, None) == token:
            with contextlib.suppress(RelayError):
                await self._store.lease_release(shard, self.rules.owner, token)
            log.info("lease released for rebalance", extra={"shard": shard})

    def wake(self, shard: int | None = None) -> None:
        """A hint that rows are waiting (on shard, or on any): start the next cycle now."""
        if shard is None or shard in self._shards:
            self._wake.set()

    async def drain(self, grace_s: float) -> dict[int, int]:
        """Shutdown (stopping is set, so no cycle starts): let what was sent be settled
        within grace_s; returns the leases held. Rows of a cycle cut short stay pending:
        republished later, never lost."""
        held = self.held
        try:
            await asyncio.wait_for(self._until_done(self._begun), grace_s)
        except TimeoutError:
            log.warning("grace period over; abandoned the cycle in flight")
            if self._settling is not None:
                self._settling[2].cancel()
        self._shards.clear()
        self._leaving.clear()
        return held

    # ------------------------------------------------------------------ one cycle

    async def run_once(self) -> BatchOutcome:
        """One whole cycle over the held shards, settled before it returns."""
        sent = await self._send()
        if sent is None:
            return BatchOutcome(0)
        outcome = await self._settled()
        assert outcome is not None
        return outcome

    async def _send(self) -> Sent | None:
        """Claim and send while the previous batch settles; then wait for that settle and
        start this batch's. None when nothing was due."""
        tokens = dict(self._shards)
        if not tokens:
            await self._settled()
            return None
        self._begun += 1
        number = self._begun
        generation = self._producer.generation
        previous = self._settling[1] if self._settling is not None else None
        try:
            sent = await send_batch(
                tokens,
                store=self._store,
                publisher=self._producer.publisher,
                rules=self.rules,
                after=previous,
            )
        finally:
            await self._settled()
        if sent is None:
            self._record(BatchOutcome(0))
            await self._mark_done(number)
            return None
        if sent.fatal:
            await self._producer.recreate(generation)
        task = asyncio.create_task(settle_batch(sent, store=self._store, rules=self.rules))
        self._settling = (number, sent, task)
        return sent

    async def _settled(self) -> BatchOutcome | None:
        """Wait for the settle in flight, if any, and take in what it did."""
        if self._settling is None:
            return None
        number, sent, task = self._settling
        try:
            outcome = await asyncio.shield(task)
        except StoreUnavailable as exc:
            # Published but not marked: the rows stay pending and go out again (a
            # duplicate, never a loss); the next claim finds the database's state.
            self._observer.store_error()
            log.warning("settle failed; its rows will be sent again", extra={"error": str(exc)})
            return None
        finally:
            if task.done():
                self._settling = None
                await self._mark_done(number)
        for shard in outcome.lost:
            self._observer.lease_lost()
            log.warning("fenced write refused: lease lost", extra={"shard": shard})
            if self._shards.get(shard) == sent.tokens[shard]:
                del self._shards[shard]
        if outcome.parked:
            log.warning("rows parked", extra={"count": outcome.parked})
        self._record(outcome)
        return outcome

    def _record(self, outcome: BatchOutcome) -> None:
        self._sup.tick()
        self._observer.batch(outcome)
        if self._on_batch is not None:
            self._on_batch(outcome)

    async def _mark_done(self, number: int) -> None:
        async with self._progress:
            self._done = max(self._done, number)
            self._progress.notify_all()

    async def _until_done(self, number: int) -> None:
        async with self._progress:
            await self._progress.wait_for(lambda: self._done >= number)

    # ------------------------------------------------------------------ the loop

    async def _attempt(self) -> Sent | None:
        # The producer this attempt uses: a failure seen after it was already replaced
        # must not replace the new one too.
        generation = self._producer.generation
        try:
            return await self._send()
        except KafkaUnavailable as exc:
            self._observer.kafka_outage()
            if exc.error.fatal:
                await self._producer.recreate(generation)
            raise
        except StoreUnavailable:
            self._observer.store_error()
            raise
        finally:
            if self._begun > self._done and self._settling is None:
                await self._mark_done(self._begun)  # a send that failed is over too

    async def run(self) -> None:
        pacing = self.pacing
        last_rows = time.monotonic()
        try:
            while not self._sup.stopping.is_set():
                started = time.monotonic()
                self._wake.clear()
                try:
                    sent = await self._sup.retry("relay batch", self._attempt, retriable)
                except (KafkaUnavailable, StoreUnavailable, PublishFailed):
                    return  # raised only once stopping; nothing was settled, rows stay pending
                except Exception:
                    log.exception("relay cycle failed unexpectedly")
                    await self._sup.sleep(1.0)
                    continue
                if sent is not None:
                    last_rows = started
                    if sent.full:
                        continue
                quiet = started - last_rows > pacing.idle_after_s
                interval = pacing.idle_interval_s if quiet else pacing.interval_s
                await self._sup.sleep(max(0.0, interval - (time.monotonic() - started)), self._wake)
        finally:
            with contextlib.suppress(Exception):
                await self._settled()  # what was sent is settled before the loop ends
