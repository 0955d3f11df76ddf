"""The wake-up path: one cheap probe per replica, every probe_interval_s, asks which of the
shards this replica holds have a row ready, and wakes only those shard workers.

A committed event is found within a few milliseconds, with one statement for all shards
instead of every shard polling, and no NOTIFY per row (NOTIFY hints, when on, wake
workers too). After idle_after_s with nothing found (and no claim that returned rows), it runs
every idle_interval_s instead, so an idle relay costs little; the first find brings it
back to interval_s. A probe is ignored for a worker that claimed or settled since the probe
was asked (it saw those rows already), and a worker whose claim came back empty after a
wake (its ready rows are held back behind a failing row of their key) is not probed again
for a while (PollSettings.poll_interval_s, doubling up to idle_interval_s).
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

from pydantic import Field, model_validator

from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.shard_worker import ShardWorkers
from relay.store import Store

log = logging.getLogger("relay.wakeup")


class ProbeSettings(SettingsGroup):
    env_infix: ClassVar[str] = "probe_"

    interval_s: float = Field(
        default=0.005,
        gt=0,
        description="How often one statement asks which held shards have a row ready, while "
        "rows come (the wake-up path: commit-to-claim latency is about half of it).",
    )
    idle_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="The probe's interval once it has found nothing for idle_after_s: what "
        "an idle relay costs (and the latency of the first event after a quiet spell).",
    )
    idle_after_s: float = Field(
        default=1.0, ge=0, description="Quiet time after which the probe slows down."
    )

    @model_validator(mode="after")
    def _intervals(self) -> ProbeSettings:
        if self.interval_s > self.idle_interval_s:
            raise ValueError(
                "probe_interval_s (OUTBOX_PROBE_INTERVAL_S) must not exceed "
                "probe_idle_interval_s (OUTBOX_PROBE_IDLE_INTERVAL_S)"
            )
        return self


class Prober:
    def __init__(
        self,
        settings: ProbeSettings,
        *,
        store: Store,
        workers: ShardWorkers,
        supervisor: Supervisor,
    ) -> None:
        self.settings = settings
        self._store = store
        self._workers = workers
        self._sup = supervisor
        self.probes = 0  # statements run, for the idle-cost report

    async def run_once(self) -> set[int]:
        """One probe; returns the shards whose workers it woke."""
        waiting = self._workers.waiting()
        if not waiting:
            return set()
        ready = await self._store.probe_ready(sorted(waiting))
        self.probes += 1
        return self._workers.wake_ready(ready, waiting)

    async def run(self) -> None:
        s = self.settings
        last_found = time.monotonic()
        while not self._sup.stopping.is_set():
            started = time.monotonic()
            try:
                if await self.run_once():
                    last_found = started
            except StoreUnavailable as exc:
                log.debug("probe failed", extra={"error": str(exc)})
                await self._sup.sleep(1.0)  # the lease loop reports the outage
            active = max(last_found, self._workers.last_rows_at)
            quiet = started - active > s.idle_after_s
            interval = s.idle_interval_s if quiet else s.interval_s
            await self._sup.sleep(max(0.0, interval - (time.monotonic() - started)))
