"""A relay as production composes it (store, PublisherKeeper, Pipeline with its Lane,
LeaseKeeper), driven one cycle at a time instead of by its loop, so a test chooses when
each cycle runs and when its settle does.

What a test may choose and the relay's loop leaves to timing: a batch's settle waits
until the test lets it go, or until the next cycle's claim has returned, so that claim
reads the database as it was before the settle (the overlap the loop runs with). Nothing
else is replaced: the step, KeyOrder, the store's SQL and the lease keeper are the
production ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

from outbox_core.supervisor import Supervisor
from relay.config import RelaySettings
from relay.control.leases import LeaseChanges, LeaseKeeper
from relay.ops.observer import RelayObserver
from relay.pipeline.loop import Pipeline, PublisherKeeper
from relay.pipeline.step import BatchOutcome, Sent
from relay.store import ClaimedRow, ClaimRequest, Settled, SettleRequest, Store
from relay.transport.memory import MemoryPublisher

log = logging.getLogger("tests.relay_harness")


class SettleGate:
    """The store, whose settles wait for release(): called by the test, or by the next
    claim once it has returned. Claims and settles still run the store's own SQL."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._waiting: list[asyncio.Event] = []
        self.arrived = asyncio.Event()  # a settle waits at the gate

    def release(self) -> None:
        for gate in self._waiting:
            gate.set()
        self._waiting.clear()
        self.arrived.clear()

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        rows = await self.inner.claim(request)
        self.release()
        return rows

    async def settle(self, request: SettleRequest) -> Settled:
        gate = asyncio.Event()
        self._waiting.append(gate)
        self.arrived.set()
        await gate.wait()
        return await self.inner.settle(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class DrivenRelay:
    """One relay process: its settings name its replica; `store` is opened by the caller
    and may be shared (SQLite: one relay per file, so incarnations share the one store);
    shard_count: the database's (the service reads it at start-up)."""

    def __init__(
        self, settings: RelaySettings, store: Store, broker: MemoryPublisher, shard_count: int
    ) -> None:
        self.settings = settings
        self.owner = settings.leases.replica_id
        self.store = store
        self.gate = SettleGate(store)
        gated = cast(Store, self.gate)
        self.supervisor = Supervisor(log)
        self.observer = RelayObserver(settings.transport)
        self.keeper = PublisherKeeper(
            broker, supervisor=self.supervisor, observer=self.observer, transport="memory"
        )
        self.outcomes: list[BatchOutcome | None] = []
        self.pipeline = Pipeline(
            settings.probe,
            settings.batch_rules(),
            store=gated,
            publisher=self.keeper,
            observer=self.observer,
            supervisor=self.supervisor,
            on_batch=self.outcomes.append,
        )
        (self.lane,) = self.pipeline.lanes
        self.leases = LeaseKeeper(
            settings.leases,
            shard_count=shard_count,
            store=gated,
            pipeline=self.pipeline,
            observer=self.observer,
            supervisor=self.supervisor,
        )

    async def start(self) -> LeaseChanges | None:
        await self.keeper.start()
        return await self.leases.run_once()

    async def cycle(self) -> Sent | None:
        """One turn of the lane's loop body (Lane._attempt, what Supervisor.retry runs);
        TransportUnavailable propagates as it does to the loop's retry."""
        if not self.pipeline.held:
            self.gate.release()  # no claim will come to let the settle in flight go
        sent = await self.lane._attempt()
        if self.settling:
            await self.gate.arrived.wait()  # the settle's task has started, up to the gate
        return sent

    async def settle(self) -> BatchOutcome | None:
        """Let the settle in flight run, and wait for it."""
        self.gate.release()
        return await self.lane.step.settled()

    @property
    def settling(self) -> bool:
        return self.lane.step.settling

    async def crash(self) -> None:
        """The process dies: the settle in flight never runs; nothing in memory survives."""
        self.lane.step.abandon()
        with contextlib.suppress(asyncio.CancelledError):
            await self.lane.step.settled()
        self.supervisor.stop()
