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

The loop is a `Lane`. With fair turns and tenant_bulk_rows, the cycle runs two lanes over
the same shards, each with its own tenants (lanes.py): a tenant's backlog drains in the
bulk lane while the quick lane keeps the other tenants' events moving.

Leases come and go between cycles (leases.py calls start, drop, hand_over); a cycle
settles with the tokens it claimed with, fenced per shard in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from outbox_core.supervisor import Supervisor, Wake
from relay.batch import BatchOutcome, BatchRules, Sent, send_batch, settle_batch
from relay.errors import KafkaUnavailable, PublishFailed, RelayError, StoreUnavailable
from relay.lanes import LaneName, TenantLanes
from relay.observer import RelayObserver
from relay.producer_keeper import ProducerKeeper, retriable
from relay.store import Store
from relay.wakeup import ProbeSettings

log = logging.getLogger("relay.cycle")


@dataclass
class Shards:
    """The leases the lanes claim for (shard -> token), and those being handed over."""

    claimed: dict[int, int] = field(default_factory=dict)
    leaving: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LaneParts:
    """What every lane of a cycle shares."""

    pacing: ProbeSettings
    store: Store
    producer: ProducerKeeper
    observer: RelayObserver
    supervisor: Supervisor
    on_batch: Callable[[BatchOutcome], None] | None


class Cycle:
    """The shards this replica holds, and the lanes that claim, send and settle for them."""

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
        bulk_producer: ProducerKeeper | None = None,
    ) -> None:
        self.rules = rules
        self._store = store
        self._shards = Shards()
        parts = LaneParts(pacing, store, producer, observer, supervisor, on_batch)
        turns = rules.turns
        if turns is None or rules.bulk_rows is None:
            self.lanes = [Lane("cycle", rules, self._shards, parts)]
            return
        tenants = TenantLanes(turns, rules.bulk_rows, rules.batch.batch_size)
        # A producer of its own for the bulk lane: one producer keeps one request in
        # flight per broker, so the quick lane's records would queue behind megabytes of
        # the bulk lane's.
        bulk_parts = replace(parts, producer=bulk_producer or producer)
        self.lanes = [
            Lane("cycle-quick", rules, self._shards, parts, tenants, "quick"),
            Lane("cycle-bulk", rules, self._shards, bulk_parts, tenants, "bulk"),
        ]

    @property
    def held(self) -> dict[int, int]:
        """Every lease this replica holds, shards being handed over included."""
        return {**self._shards.claimed, **self._shards.leaving}

    def start(self, shard: int, token: int) -> None:
        self._shards.claimed[shard] = token
        self.wake()

    def drop(self, shard: int) -> None:
        """The lease is gone: claim no more for it (a settle in flight is fenced)."""
        self._shards.claimed.pop(shard, None)
        self._shards.leaving.pop(shard, None)

    async def hand_over(self, shard: int) -> None:
        """Rebalance: claim no more for the shard, let what was sent for it be settled,
        then release the lease for its new owner."""
        token = self._shards.claimed.pop(shard, None)
        if token is None:
            return
        self._shards.leaving[shard] = token
        await self._all_done()
        if self._shards.leaving.pop(shard, None) == token:
            with contextlib.suppress(RelayError):
                await self._store.lease_release(shard, self.rules.owner, token)
            log.info("lease released for rebalance", extra={"shard": shard})

    def wake(self, shard: int | None = None) -> None:
        """A hint that rows are waiting (on shard, or on any): start the next cycle now."""
        if shard is None or shard in self._shards.claimed:
            for lane in self.lanes:
                lane.wake()

    async def drain(self, grace_s: float) -> dict[int, int]:
        """Shutdown (stopping is set, so no cycle starts): let what was sent be settled
        within grace_s; returns the leases held. Rows of a cycle cut short stay pending:
        republished later, never lost."""
        held = self.held
        try:
            await asyncio.wait_for(self._all_done(), grace_s)
        except TimeoutError:
            log.warning("grace period over; abandoned the cycle in flight")
            for lane in self.lanes:
                lane.abandon()
        self._shards.claimed.clear()
        self._shards.leaving.clear()
        return held

    async def _all_done(self) -> None:
        """Every batch begun by now, in every lane, settled."""
        await asyncio.gather(*(lane.until_done(lane.begun) for lane in self.lanes))


class Lane:
    """One loop of claim, send and settle over the cycle's shards, for its tenants."""

    def __init__(
        self,
        name: str,
        rules: BatchRules,
        shards: Shards,
        parts: LaneParts,
        tenants: TenantLanes | None = None,
        lane: LaneName = "quick",
    ) -> None:
        self.name = name  # the supervised task's
        self.rules = rules
        self._shards = shards
        self.pacing = parts.pacing
        self._store = parts.store
        self._producer = parts.producer
        self._observer = parts.observer
        self._sup = parts.supervisor
        self._on_batch = parts.on_batch
        self._tenants = tenants
        self._lane = lane
        self._wake = Wake()
        if tenants is not None:
            tenants.on_wake(lane, self._wake.set)
        # The batch sent and being settled, with its number; sends are numbered as they
        # begin, and _done is the highest number whose outcome is final.
        self._settling: tuple[int, Sent, asyncio.Task[BatchOutcome]] | None = None
        self.begun = 0
        self._done = 0
        self._progress = asyncio.Condition()

    def wake(self) -> None:
        self._wake.set()

    def abandon(self) -> None:
        """Shutdown past its grace period: stop waiting for the settle in flight."""
        if self._settling is not None:
            self._settling[2].cancel()

    # ------------------------------------------------------------------ one cycle

    async def run_once(self) -> BatchOutcome:
        """One whole cycle over the held shards, settled before it returns."""
        sent = await self._send()
        if sent is None:
            return BatchOutcome(0)
        outcome = await self._settled()
        assert outcome is not None
        return outcome

    def _rules(self) -> BatchRules | None:
        """This claim's rules: the lane's tenants, when the cycle has lanes; None when the
        lane has none to claim for."""
        if self._tenants is None:
            return self.rules
        turns = self._tenants.turns(self._lane)
        return None if turns is None else replace(self.rules, turns=turns)

    async def _send(self) -> Sent | None:
        """Claim and send while the previous batch settles; then wait for that settle and
        start this batch's. None when nothing was due."""
        tokens = dict(self._shards.claimed)
        rules = self._rules()
        if not tokens or rules is None:
            await self._settled()
            return None
        self.begun += 1
        number = self.begun
        generation = self._producer.generation
        previous = self._settling[1] if self._settling is not None else None
        try:
            sent = await send_batch(
                tokens,
                store=self._store,
                publisher=self._producer.publisher,
                rules=rules,
                after=previous,
            )
        finally:
            await self._settled()
        if self._tenants is not None:
            self._tenants.claimed(self._lane, number, sent.rows if sent is not None else [])
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
            if self._shards.claimed.get(shard) == sent.tokens[shard]:
                del self._shards.claimed[shard]
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
        if self._tenants is not None:
            self._tenants.settled(self._lane, self._done)

    async def until_done(self, number: int) -> None:
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
            if self.begun > self._done and self._settling is None:
                await self._mark_done(self.begun)  # a send that failed is over too

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
