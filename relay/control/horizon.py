"""What holds the database's vacuum horizon back: the oldest open transaction, snapshot,
replication slot and prepared transaction, as gauges and, past a threshold, a warning
that names the session (pid, application_name, state), so an operator knows whom to
call. Postgres only; `run_once` is one look.

While one of them is open, no row published after it started can be vacuumed away: the
table and its indexes grow, and every statement that walks the published rows' entries
slows down (claims do not: relay/control/floors.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from outbox_core.periodic import every
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.ops.observer import RelayObserver
from relay.store import HorizonHolder, Store

log = logging.getLogger("relay.horizon")


class HorizonSettings(SettingsGroup):
    env_infix: ClassVar[str] = "horizon_"

    interval_s: float = Field(
        default=30.0,
        gt=0,
        description="How often the relay looks for what holds vacuum back (Postgres): the "
        "oldest transaction, snapshot, replication slot and prepared transaction.",
    )
    warn_age_s: float = Field(
        default=600.0,
        gt=0,
        description="A holder older than this is logged as a warning with its pid, "
        "application_name and state (a slot has no age: see warn_xid_age).",
    )
    warn_xid_age: int = Field(
        default=50_000_000,
        gt=0,
        description="A holder this many transactions behind the current one is logged as "
        "a warning too (the only measure a replication slot has).",
    )


class Horizon:
    def __init__(
        self,
        settings: HorizonSettings,
        *,
        store: Store,
        observer: RelayObserver,
        supervisor: Supervisor,
        standing_by: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self._store = store
        self._observer = observer
        self._sup = supervisor
        # What holds vacuum back is the database's, the same from every replica: a
        # standby leaves the look to the active ones (as the backlog gauges).
        self._standing_by = standing_by

    async def run_once(self) -> list[HorizonHolder]:
        if self._standing_by():
            return []
        holders = await self._store.horizon()
        self._observer.horizon(holders)
        s = self.settings
        for h in holders:
            if (h.age_s is not None and h.age_s >= s.warn_age_s) or h.xid_age >= s.warn_xid_age:
                log.warning(
                    "an old %s holds vacuum back: published outbox rows stay until it ends",
                    h.kind,
                    extra={
                        "kind": h.kind,
                        "age_s": None if h.age_s is None else round(h.age_s, 1),
                        "xid_age": h.xid_age,
                        "pid": h.pid,
                        "application_name": h.application_name,
                        "state": h.state,
                    },
                )
        return holders

    async def run(self) -> None:
        if self._store.dialect != "postgres":
            return

        def failed(exc: Exception) -> None:
            log.debug("horizon look failed", extra={"error": str(exc)})

        await every(
            self._sup,
            self.settings.interval_s,
            self.run_once,
            failed=failed,
            errors=(StoreUnavailable,),
        )
