"""Two lanes for fair turns: a tenant with a backlog drains in a lane of its
own, beside the cycles that carry everyone else's rows, so its large batches never sit
in front of another tenant's next event.

Turns alone bound another tenant's wait by one cycle, but a cycle that carries a bulk
import is thousands of rows and up to a second long: a small tenant's event committed
during it waits for it to end and then for its own. With lanes the pipeline runs two loops
over the same shards (loop.py): the quick lane claims every tenant but the bulk ones,
at most `threshold` rows of one tenant per shard; the bulk lane claims only the bulk
tenants, with the full batch size.

A tenant is claimed by one lane at a time, so two lanes never hold rows of one key (a
key belongs to one tenant): that is what keeps per-key order and keeps a row from being
sent twice at once. It moves between lanes only once the lane it leaves has settled
every batch that could hold its rows:

- quick -> bulk when a quick claim gave it `threshold` rows in a shard (it has more
  waiting): from then on the quick lane skips it, and the bulk lane takes it once the
  quick lane's batches up to that claim are settled;
- bulk -> quick when a bulk claim shows its backlog gone (fewer than `threshold` rows in
  every shard whose batch had room): the bulk lane stops claiming it at once, and the
  quick lane takes it once the bulk lane's batches up to that claim are settled.

Only the lane that claims a tenant decides to move it, between its claim and its next
one, so a claim in flight never races a move of its own tenants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from relay.store import ClaimedRow, TenantTurns

LaneName = Literal["quick", "bulk"]


class TenantLanes:
    """Which lane claims which tenant ('' names the untenanted rows)."""

    def __init__(self, turns: TenantTurns, bulk_rows: int, batch_size: int) -> None:
        self._base = turns
        # A tenant that fills its share of a quick batch has a backlog.
        self.threshold = min(bulk_rows, turns.max_rows or bulk_rows, batch_size)
        self._quick_turns = replace(turns, max_rows=self.threshold)
        self._bulk_full_at = min(batch_size, turns.max_rows or batch_size)
        self.bulk: set[str] = set()
        # Moving, by the number of the batch after whose settle they arrive.
        self._to_bulk: dict[str, int] = {}
        self._to_quick: dict[str, int] = {}
        self._wakes: dict[LaneName, Callable[[], None]] = {}

    def on_wake(self, lane: LaneName, wake: Callable[[], None]) -> None:
        self._wakes[lane] = wake

    def turns(self, lane: LaneName) -> TenantTurns | None:
        """The lane's next claim; None when it has no tenant to claim for."""
        if lane == "bulk":
            return replace(self._base, only=frozenset(self.bulk)) if self.bulk else None
        leaving = self.bulk.union(self._to_bulk, self._to_quick)
        return replace(self._quick_turns, skip=frozenset(leaving))

    def claimed(self, lane: LaneName, number: int, rows: Sequence[ClaimedRow]) -> None:
        """What the lane's claim number `number` found decides who moves."""
        counts = Counter((row.tenant or "", row.shard) for row in rows)
        if lane == "quick":
            for (tenant, _), n in counts.items():
                if n >= self.threshold and tenant not in self._to_bulk:
                    self._to_bulk[tenant] = number
            return
        rows_of = Counter(row.shard for row in rows)
        staying = {
            tenant
            for (tenant, shard), n in counts.items()
            if n >= self.threshold or rows_of[shard] >= self._bulk_full_at
        }
        for tenant in self.bulk - staying:
            self.bulk.discard(tenant)
            self._to_quick[tenant] = number

    def settled(self, lane: LaneName, done: int) -> None:
        """The lane's batches up to `done` are settled: the tenants waiting on them move."""
        moving = self._to_bulk if lane == "quick" else self._to_quick
        arrived = [tenant for tenant, number in moving.items() if number <= done]
        if not arrived:
            return
        for tenant in arrived:
            del moving[tenant]
        if lane == "quick":
            self.bulk.update(arrived)
        other: LaneName = "bulk" if lane == "quick" else "quick"
        if other in self._wakes:
            self._wakes[other]()
