"""The replica's work loop. The `Pipeline` is the shards this replica holds and the lanes
that work them; a `Lane` runs the step (step.py) over and over, one cycle after another:
each cycle claims for every held shard in one statement, publishes what came back, and
starts its settle, which runs while the next cycle claims and sends.

One loop instead of a task per shard: at a steady trickle a cycle carries every shard's
new rows in three round trips (claim, send, settle), where a task per shard paid three
per shard. An empty claim is the probe: while rows come a cycle starts every
probe_interval_s, at once after a shard came back full, and every probe_idle_interval_s
once nothing was found for probe_idle_after_s (ProbeSettings); a NOTIFY hint wakes it
early. After a cycle that found only a few rows the next waits probe_gather_s, so a
trickle pays fewer claims and settles per event. A lane without shards (a standby,
active_replicas) does not cycle at all until a lease round hands it one. Rows held back behind a failing row of their key are not claimed at all (the
claim's NOT EXISTS), so nothing spins on them.

With fair turns and tenant_bulk_rows, the pipeline runs two lanes over the same shards,
each with its own tenants (lanes.py): a tenant's backlog drains in the bulk lane while the
quick lane keeps the other tenants' events moving.

Leases come and go between cycles (control/leases.py calls start, drop, hand_over); a
cycle settles with the tokens it claimed with, fenced per shard in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from pydantic import Field, model_validator

from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor, Wake
from relay.errors import PublishingStopped, RelayConfigError, RelayError, StoreUnavailable
from relay.ops.observer import RelayObserver
from relay.pipeline.lanes import LaneName, TenantLanes
from relay.pipeline.step import BatchOutcome, BatchRules, Sent, Step
from relay.store import Store
from relay.transport.errors import PublishFailed, TransportUnavailable
from relay.transport.protocol import Publisher, ShardPublisher

log = logging.getLogger("relay.cycle")
producer_log = logging.getLogger("relay.producer")

# A lane without shards only wakes to see whether it has been handed one, which
# Pipeline.start also tells it at once: this is a backstop, not a poll of the database.
NO_SHARD_WAIT_S = 1.0


class ProbeSettings(SettingsGroup):
    """How soon the relay looks for new rows: the probe, an empty claim over every held
    shard (one statement, one short index walk per shard). While rows come, a cycle
    starts every interval_s, so a committed event is found within a few milliseconds
    without a NOTIFY per row; after idle_after_s with nothing found it runs every
    idle_interval_s, so an idle relay costs little; the first find brings it back to
    interval_s. NOTIFY hints, when on, start a cycle at once."""

    env_infix: ClassVar[str] = "probe_"

    interval_s: float = Field(
        default=0.005,
        gt=0,
        description="While rows come, how often a cycle claims for every held shard (the "
        "wake-up path: commit-to-claim latency is about half of it).",
    )
    idle_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="The cycle's interval once it has found nothing for idle_after_s: what "
        "an idle relay costs (and the latency of the first event after a quiet spell).",
    )
    idle_after_s: float = Field(
        default=1.0, ge=0, description="Quiet time after which the cycle slows down."
    )
    gather_s: float = Field(
        default=0.01,
        ge=0,
        le=1.0,
        description="After a cycle that found fewer than gather_rows rows, the next one "
        "starts this long after it began instead of interval_s: a trickle of a few events a "
        "cycle then pays one claim, send and settle for more of them (adds at most "
        "gather_s - interval_s to commit-to-ack; 0: off).",
    )
    gather_rows: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="A cycle that found at least this many rows is followed at "
        "interval_s (or at once when a shard came back full).",
    )

    @model_validator(mode="after")
    def _intervals(self) -> ProbeSettings:
        if self.interval_s > self.idle_interval_s:
            raise ValueError(
                "probe_interval_s (OUTBOX_PROBE_INTERVAL_S) must not exceed "
                "probe_idle_interval_s (OUTBOX_PROBE_IDLE_INTERVAL_S)"
            )
        return self


def retriable(exc: BaseException) -> bool:
    """What the relay retries with backoff: the transport or the database away, a
    retriable send."""
    return isinstance(exc, TransportUnavailable | StoreUnavailable) or (
        isinstance(exc, PublishFailed) and exc.retriable
    )


class PublisherKeeper:
    """The publisher a lane sends through, and its replacement when it breaks.

    A fatal producer error (fenced, out-of-order sequence, closed) needs a new producer, not
    a new process. Several lanes may see the same failure; the generation counter makes
    sure only the first of them replaces it, and the others carry on with the new one."""

    def __init__(
        self,
        publisher: Publisher,
        *,
        supervisor: Supervisor,
        observer: RelayObserver,
        transport: str = "kafka",
    ) -> None:
        self.publisher = publisher
        self.transport = transport  # its name in the logs: "kafka start failed; retrying"
        self.generation = 0
        self._lock = asyncio.Lock()
        self._sup = supervisor
        self._observer = observer

    async def start(self) -> None:
        """Start the producer, retrying while the transport is away; raises the last error
        once stopping, PublishingStopped on one no retry can mend."""
        await self._retry(f"{self.transport} start", self.publisher.start)
        self._observer.transport_started()

    async def _retry(self, what: str, call: Callable[[], Awaitable[None]]) -> None:
        try:
            await self._sup.retry(what, call, retriable)
        except Exception as exc:
            if self._sup.stopping.is_set() or retriable(exc) or isinstance(exc, RelayConfigError):
                raise
            # The replica cannot publish: its leases must go to one that can.
            raise PublishingStopped(f"{what} failed for good: {exc}") from exc

    async def recreate(self, seen_generation: int) -> None:
        """Replace the producer that failed at seen_generation (once, whoever asks)."""
        async with self._lock:
            if seen_generation != self.generation:
                return  # another lane already replaced it
            producer_log.warning(
                "producer failed fatally; recreating it", extra={"transport": self.transport}
            )
            self._observer.producer_recreated()
            await self._retry(f"{self.transport} producer recreate", self.publisher.recreate)
            self.generation += 1

    async def stop(self) -> None:
        await self.publisher.stop()

    def taken(self, shard: int, token: int, previous: str | None) -> None:
        """The shard's lease was taken from replica `previous`: a transactional producer
        fences that replica before the shard's first claim."""
        if isinstance(self.publisher, ShardPublisher):
            self.publisher.taken(shard, token, previous)

    def forget(self, shard: int) -> None:
        """The shard's lease is gone: a publisher holding something per shard (a
        transactional producer) lets it go."""
        if isinstance(self.publisher, ShardPublisher):
            self.publisher.forget(shard)


@dataclass
class Shards:
    """The leases the lanes claim for (shard -> token), and those being handed over."""

    claimed: dict[int, int] = field(default_factory=dict)
    leaving: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LaneParts:
    """What every lane of a pipeline shares."""

    probe: ProbeSettings
    store: Store
    publisher: PublisherKeeper
    observer: RelayObserver
    supervisor: Supervisor
    on_batch: Callable[[BatchOutcome], None] | None
    on_stopped: Callable[[PublishingStopped], None]


def _raise(exc: PublishingStopped) -> None:
    raise exc


class Pipeline:
    """The shards this replica holds, and the lanes that claim, send and settle for them."""

    def __init__(
        self,
        probe: ProbeSettings,
        rules: BatchRules,
        *,
        store: Store,
        publisher: PublisherKeeper,
        observer: RelayObserver,
        supervisor: Supervisor,
        on_batch: Callable[[BatchOutcome], None] | None = None,
        bulk_publisher: PublisherKeeper | None = None,
        on_stopped: Callable[[PublishingStopped], None] = _raise,
    ) -> None:
        """on_stopped: a lane cannot publish any more (its producer cannot be started
        again); the lane has ended."""
        self.rules = rules
        self._store = store
        self._publisher = publisher
        self._shards = Shards()
        parts = LaneParts(probe, store, publisher, observer, supervisor, on_batch, on_stopped)
        turns = rules.turns
        if turns is None or rules.bulk_rows is None:
            self.lanes = [Lane("lane", rules, self._shards, parts)]
            return
        tenants = TenantLanes(turns, rules.bulk_rows, rules.batch.batch_size)
        # A producer of its own for the bulk lane: one producer keeps one request in
        # flight per broker, so the quick lane's records would queue behind megabytes of
        # the bulk lane's.
        bulk_parts = replace(parts, publisher=bulk_publisher or publisher)
        self.lanes = [
            Lane("lane-quick", rules, self._shards, parts, tenants, "quick"),
            Lane("lane-bulk", rules, self._shards, bulk_parts, tenants, "bulk"),
        ]

    @property
    def held(self) -> dict[int, int]:
        """Every lease this replica holds, shards being handed over included."""
        return {**self._shards.claimed, **self._shards.leaving}

    def start(self, shard: int, token: int, previous: str | None = None) -> None:
        """A lease taken under `token` from replica `previous` (None: free or released)."""
        self._publisher.taken(shard, token, previous)
        self._shards.claimed[shard] = token
        self.wake()

    def drop(self, shard: int) -> None:
        """The lease is gone: claim no more for it (a settle in flight is fenced)."""
        self._shards.claimed.pop(shard, None)
        self._shards.leaving.pop(shard, None)
        self._publisher.forget(shard)

    async def hand_over(self, shard: int) -> None:
        """Rebalance: claim no more for the shard, let what was sent for it be settled,
        then release the lease for its new owner."""
        token = self._shards.claimed.pop(shard, None)
        if token is None:
            return
        self._shards.leaving[shard] = token
        await self._all_done()
        if self._shards.leaving.pop(shard, None) == token:
            self._publisher.forget(shard)
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
                lane.step.abandon()
        self._shards.claimed.clear()
        self._shards.leaving.clear()
        return held

    async def _all_done(self) -> None:
        """Every batch begun by now, in every lane, settled."""
        await asyncio.gather(*(lane.until_done(lane.step.begun) for lane in self.lanes))


class Lane:
    """One loop of cycles over the pipeline's shards, for its tenants."""

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
        self.probe = parts.probe
        self._publisher = parts.publisher
        self._observer = parts.observer
        self._sup = parts.supervisor
        self._on_batch = parts.on_batch
        self._on_stopped = parts.on_stopped
        self._tenants = tenants
        self._lane = lane
        self._wake = Wake()
        if tenants is not None:
            tenants.on_wake(lane, self._wake.set)
        self.step = Step(
            rules,
            store=parts.store,
            publisher=parts.publisher.publisher,
            on_settled=self._settled,
        )
        # Sends are numbered as they begin (step.begun); _done is the highest number
        # whose outcome is final.
        self._done = 0
        self._progress = asyncio.Condition()
        # The pace the lane chose after its last cycle (0 after a full shard): a test
        # waits for the idle pace instead of counting cycles in a wall-clock window.
        self.pace_s = self.probe.interval_s

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ one cycle

    def _rules(self) -> BatchRules | None:
        """This claim's rules: the lane's tenants, when the pipeline has lanes; None when
        the lane has none to claim for."""
        if self._tenants is None:
            return self.rules
        turns = self._tenants.turns(self._lane)
        return None if turns is None else replace(self.rules, turns=turns)

    async def _cycle(self) -> Sent | None:
        """The step's send (claim and send while the previous batch settles, then start
        this batch's settle), and what the lane does around it. None when nothing was due."""
        tokens = dict(self._shards.claimed)
        rules = self._rules()
        if not tokens or rules is None:
            await self.step.settled()
            self._observer.cycle(self.name, None)  # nothing is due to this lane
            return None
        generation = self._publisher.generation
        sent = await self.step.send(tokens, rules, ahead=True)
        self._observer.claimed(0 if sent is None else len(sent.rows))
        number = self.step.begun
        if self._tenants is not None:
            self._tenants.claimed(self._lane, number, sent.rows if sent is not None else [])
        if sent is None:
            self._record(BatchOutcome(0))
            await self._mark_done(number)
            return None
        if sent.fatal:
            await self._publisher.recreate(generation)
        return sent

    async def _settled(self, sent: Sent, outcome: BatchOutcome | None) -> None:
        """The step's settle of `sent` ended (outcome None: it failed)."""
        self._observer.settled()
        await self._mark_done(sent.number)
        if outcome is None:
            self._observer.store_error()
            return
        for shard in outcome.lost:
            self._observer.lease_lost()
            log.warning("fenced write refused: lease lost", extra={"shard": shard})
            if self._shards.claimed.get(shard) == sent.tokens[shard]:
                del self._shards.claimed[shard]
                self._publisher.forget(shard)
        if outcome.parked:
            log.warning("rows parked", extra={"count": outcome.parked})
        self._record(outcome)

    def _record(self, outcome: BatchOutcome) -> None:
        self._sup.tick()
        self._observer.batch(outcome)
        self._observer.cycle(self.name, outcome)
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
        generation = self._publisher.generation
        try:
            return await self._cycle()
        except TransportUnavailable as exc:
            self._observer.transport_outage()
            if exc.error.fatal:
                await self._publisher.recreate(generation)
            raise
        except StoreUnavailable:
            self._observer.store_error()
            raise
        finally:
            if self.step.begun > self._done and not self.step.settling:
                await self._mark_done(self.step.begun)  # a send that failed is over too

    async def run(self) -> None:
        probe = self.probe
        last_rows = time.monotonic()
        self._observer.cycle(self.name, None)  # the stall clock starts with the lane
        try:
            while not self._sup.stopping.is_set():
                started = time.monotonic()
                self._wake.clear()
                try:
                    sent = await self._sup.retry("relay batch", self._attempt, retriable)
                except PublishingStopped as exc:
                    log.error("publishing stopped", extra={"lane": self.name, "error": str(exc)})
                    self._on_stopped(exc)
                    return
                except (TransportUnavailable, StoreUnavailable, PublishFailed) as exc:
                    if self._sup.stopping.is_set():
                        return  # nothing was settled, rows stay pending
                    # Not retriable, yet not the rows' fault (their failures are charged
                    # in the step): the next cycle reads the database's state again.
                    log.error("relay cycle failed", extra={"error": str(exc)})
                    await self._sup.sleep(1.0)
                    continue
                except Exception:
                    log.exception("relay cycle failed unexpectedly")
                    await self._sup.sleep(1.0)
                    continue
                if sent is not None:
                    last_rows = started
                    if sent.full:
                        self.pace_s = 0.0
                        continue
                elif not self._shards.claimed:
                    # No shard (a standby, or between leases): nothing to probe. The
                    # lease round that brings a shard wakes the lane (Pipeline.start).
                    await self._sup.sleep(NO_SHARD_WAIT_S, self._wake)
                    continue
                quiet = started - last_rows > probe.idle_after_s
                interval = probe.idle_interval_s if quiet else probe.interval_s
                if sent is not None and len(sent.rows) < probe.gather_rows:
                    # Few rows a cycle: each costs a claim, a produce request and a
                    # settle whatever it carries, so let the next one gather more.
                    interval = max(interval, probe.gather_s)
                self.pace_s = interval
                await self._sup.sleep(max(0.0, interval - (time.monotonic() - started)), self._wake)
        finally:
            self.step.drop_ahead(cancel=True)
            with contextlib.suppress(Exception):
                await self.step.settled()  # what was sent is settled before the loop ends
