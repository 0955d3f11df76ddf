"""The claim floors' rounds pace themselves by the replica's role: an active relay's every
interval_s, a standby's once a second (its rounds prove nothing and would wake it ten
times a second)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from outbox_core.supervisor import Supervisor
from relay.control.floors import STANDBY_LOOK_S, ClaimFloors, FloorSettings


class CountingSupervisor(Supervisor):
    """Records each sleep a loop asks for and stops after `limit` of them."""

    def __init__(self, limit: int) -> None:
        super().__init__(logging.getLogger("test.floors"))
        self.sleeps: list[float] = []
        self._limit = limit

    async def sleep(self, seconds: float, *wake: asyncio.Event) -> None:
        self.sleeps.append(seconds)
        if len(self.sleeps) >= self._limit:
            self.stop()
        await asyncio.sleep(0)


class IdleStore:
    """A Postgres store whose sequence has drawn no id yet: a round costs one statement."""

    dialect = "postgres"

    def __init__(self) -> None:
        self.rounds = 0

    async def floor_last_id(self) -> int | None:
        self.rounds += 1
        return None

    def set_claim_floors(self, floors: Any) -> None:
        pass


async def test_a_standby_looks_once_a_second_and_an_active_relay_every_interval() -> None:
    # A rescan slice of 2 s (rescan_s / 60) differs from both paces, so each sleep tells
    # which loop asked for it.
    settings = FloorSettings(interval_s=0.1, rescan_s=120.0)
    slice_s = 2.0
    assert slice_s not in (STANDBY_LOOK_S, settings.interval_s)
    for standby, expected in ((True, STANDBY_LOOK_S), (False, 0.1)):
        sup, store = CountingSupervisor(limit=6), IdleStore()
        floors = ClaimFloors(
            settings,
            shard_count=16,
            store=store,  # type: ignore[arg-type]
            supervisor=sup,
            standing_by=lambda s=standby: s,  # type: ignore[misc]
        )
        await asyncio.wait_for(floors.run(), 5)
        # The rounds' sleeps and the rescan's, interleaved: the rounds paced as the role says.
        assert sup.sleeps.count(expected) >= 2, sup.sleeps
        assert set(sup.sleeps) == {expected, slice_s}, sup.sleeps
        assert store.rounds == (0 if standby else sup.sleeps.count(0.1))
