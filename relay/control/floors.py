"""Claim floors: per shard, an id at or below which every row is published, so a claim
starts its walk of the shard's unpublished rows above it. Postgres only; `run_once` is
one round.

Why: a snapshot older than the published rows (a long report, an `idle in transaction`
session, a replication slot) keeps vacuum from removing their index entries; a claim
that starts at the bottom of the shard steps over every one of them, so its cost grew
with the rows published since that snapshot (docs/benchmarks.md, "old snapshots").

Why a floor is safe although transactions commit out of id order (docs/design.md,
"Claim floors"): a round first reads the last id drawn from the sequence (the mark),
then lists the transactions that hold outbox_events for writing. An INSERT locks the
table before it draws its id and keeps the lock until it ends, and the sequence hands
out ids in order (cache 1, checked), so every id at or below the mark belongs to a
transaction that had ended or was listed. Once every listed one has ended, a statement
started afterwards sees every row at or below the mark that will ever exist; a floor
below both the mark and the shard's lowest unpublished id then hides nothing a claim
could take. The one way back below a floor is an operator replay (a published row made
pending again). A rescan beside the rounds sweeps the ids below the floors in slices,
one sweep per rescan_s, and lowers a shard's floor below any unpublished row it finds:
lowering a floor is always safe, and a slice crosses only its own dead entries, so the
sweep never holds the rounds still nor spends seconds of a backend at once while an old
snapshot keeps every published row's entry. A replayed row waits about rescan_s (twice
that at most: replayed in a slice the sweep was just reading).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from outbox_core.periodic import every
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.store import FloorMark, Store

log = logging.getLogger("relay.floors")

# Slices per sweep of the rescan: the dead entries below the floors (every published row's
# while an old snapshot is open) are crossed a sixtieth at a time, one slice every
# rescan_s / RESCAN_SLICES.
RESCAN_SLICES = 60

# Between a standby's looks at whether it became active: its rounds would wake it ten
# times a second for nothing (most of an idle standby's CPU); a floor proven a second
# after the takeover only lets the first claims start lower.
STANDBY_LOOK_S = 1.0


class FloorSettings(SettingsGroup):
    env_infix: ClassVar[str] = "claim_floor_"

    interval_s: float = Field(
        default=0.1,
        ge=0.01,
        description="Time between claim floor rounds (Postgres): how far behind the "
        "published rows the floors are, so how many dead index entries a claim may still "
        "step over while an old snapshot is open.",
    )
    rescan_s: float = Field(
        default=60.0,
        gt=0,
        description="How long one sweep of the ids below the claim floors takes, looking "
        "for rows made pending again (outbox-relay replay): about the longest a replayed "
        "row waits to go out.",
    )


class ClaimFloors:
    def __init__(
        self,
        settings: FloorSettings,
        *,
        shard_count: int,
        store: Store,
        supervisor: Supervisor,
        standing_by: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        # A standby claims nothing, so it proves no floors: its rounds would be the
        # fleet's largest idle cost (ten statements a second each).
        self._standing_by = standing_by
        # The database's, set again by the service once start-up has read it.
        self.shard_count = shard_count
        self._store = store
        self._sup = supervisor
        self._mark: FloorMark | None = None
        self._floors: dict[int, int] = {}
        self._cursor = 0  # the rescan's: the ids at or below it are swept

    @property
    def floors(self) -> dict[int, int]:
        """Every shard's floor (0 until a round has proven one)."""
        return {s: self._floors.get(s, 0) for s in range(self.shard_count)}

    async def run_once(self) -> bool:
        """One round: when the writers of the pending mark have all ended, move the floors
        up to what it proves (else wait for them); then take a new mark, unless every
        floor is already the last id drawn (an idle outbox costs one statement a round).
        Returns whether the floors were set."""
        if self._standing_by():
            self._stand_by()
            return False
        moved = False
        mark = self._mark
        if mark is not None:
            if await self._store.floor_writers_left(mark.writers) > 0:
                # Kept, not replaced by a new one: under a steady stream of writers a new
                # mark's list would never be empty of open ones.
                return False
            await self._apply(mark)
            self._mark, moved = None, True
        last = await self._store.floor_last_id()  # first: then the writers
        if last is None:
            self._mark = None
            return moved
        if self._mark is None and self._settled(last):
            return moved  # every shard's floor is the last id drawn: nothing to move
        self._mark = FloorMark(last, await self._store.floor_writers())
        return moved

    def _settled(self, last: int) -> bool:
        floors = self._floors
        return len(floors) == self.shard_count and all(f == last for f in floors.values())

    async def _apply(self, mark: FloorMark) -> None:
        shards = range(self.shard_count)
        base = {s: self._floors.get(s, 0) for s in shards}
        lowest = await self._store.floor_lowest(base)
        floors = {}
        for shard in shards:
            low = lowest.get(shard)
            floors[shard] = max(
                base[shard], mark.last_id if low is None else min(mark.last_id, low - 1)
            )
            # A rescan slice that lowered the floor meanwhile found a row below base.
            now = self._floors.get(shard, 0)
            if now < base[shard]:
                floors[shard] = min(floors[shard], now)
        if not self._floors:
            # Once per process: that claims skip published rows from here on.
            log.info("claim floors set", extra={"lowest_floor": min(floors.values(), default=0)})
        self._set(floors)

    def _set(self, floors: dict[int, int]) -> None:
        self._floors = floors
        self._store.set_claim_floors(floors)

    async def rescan_once(self) -> None:
        """One slice of the sweep below the floors: the next ids above the cursor, a
        RESCAN_SLICES-th of the highest floor; a shard's floor goes below an unpublished
        row found there."""
        if self._standing_by():
            self._stand_by()
            return
        if not self._floors:
            return
        top = max(self._floors.values())
        if self._cursor >= top:
            self._cursor = 0
        if top <= 0:
            return
        low = self._cursor
        high = min(top, low + -(-top // RESCAN_SLICES))
        bounds = {s: min(high, f) for s, f in self._floors.items()}
        found = await self._store.floor_unpublished_between(low, bounds)
        lowered = dict(self._floors)
        for shard, row in found.items():
            if row is not None and shard in lowered:
                lowered[shard] = min(lowered[shard], row - 1)
        if lowered != self._floors:
            log.info(
                "claim floors lowered to rows made pending again",
                extra={"shards": sorted(s for s in lowered if lowered[s] < self._floors[s])},
            )
            self._set(lowered)
        self._cursor = high

    def _stand_by(self) -> None:
        # Unproven from here: once active again, claims start at 0 until a round ends.
        self._mark = None
        if self._floors:
            self._set({})

    def forget(self) -> None:
        """After a failed round: the next one starts over from a new mark."""
        self._mark = None

    async def run(self) -> None:
        if self._store.dialect != "postgres":
            return

        warned = [float("-inf")]

        def failed(exc: Exception) -> None:
            self.forget()
            # Once a minute at most: rounds run ten times a second. Claims go on below
            # the last floor proven (a missing grant: at 0, as without floors).
            if time.monotonic() - warned[0] >= 60.0:
                warned[0] = time.monotonic()
                log.warning("claim floor round failed", extra={"error": str(exc)})

        def rescan_failed(exc: Exception) -> None:
            # The next slice tries again; the floors stay where they are meanwhile.
            log.debug("claim floor rescan failed", extra={"error": str(exc)})

        def interval() -> float:
            return STANDBY_LOOK_S if self._standing_by() else self.settings.interval_s

        # Apart from the rounds: a slice of the sweep never holds the floors still.
        await asyncio.gather(
            every(
                self._sup,
                interval,
                self.run_once,
                failed=failed,
                errors=(StoreUnavailable,),
            ),
            every(
                self._sup,
                self.settings.rescan_s / RESCAN_SLICES,
                self.rescan_once,
                failed=rescan_failed,
                errors=(StoreUnavailable,),
            ),
        )
