"""The backlog gauges (pending, parked, oldest pending age; the same by tenant), refreshed
on a timer so that a Prometheus scrape never queries the database. `run_once` is one
refresh.

The tenant gauges carry a bounded label set: the tenant_top tenants with the most pending
rows by name, the rest summed as "other"; a tenant that leaves the top loses its labels at
the next refresh (observer.py)."""

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
from relay.store import Backlog, Store

log = logging.getLogger("relay.gauges")


class GaugeSettings(SettingsGroup):
    env_infix: ClassVar[str] = "gauges_"

    interval_s: float = Field(
        default=15.0,
        gt=0,
        description="How often pending/parked/oldest-age gauges are refreshed (never per scrape).",
    )
    count_limit: int = Field(
        default=100_000,
        ge=1,
        le=1_000_000_000,
        description="The pending and parked gauges count at most this many rows a refresh, "
        "so a refresh costs the same over any backlog: a larger backlog reads as this many "
        "(the per-tenant gauges count among the first this many pending rows). The oldest "
        "pending age is exact at any size; `outbox-relay status` counts every row.",
    )
    tenant_top: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="Tenants with the most pending rows that get their own label on the "
        'per-tenant gauges; the rest are summed as tenant="other" (0: no tenant gauges).',
    )


class Gauges:
    def __init__(
        self,
        settings: GaugeSettings,
        *,
        shard_count: int,
        store: Store,
        observer: RelayObserver,
        supervisor: Supervisor,
        standing_by: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        # The backlog is the fleet's, the same from every replica: a standby leaves it to
        # the active ones (dashboards take the maximum per job). Before its first lease
        # round, and while the transport is away at start-up, a replica is no standby.
        self._standing_by = standing_by
        # The database's, set again by the service once start-up has read it.
        self.shard_count = shard_count
        self._store = store
        self._observer = observer
        self._sup = supervisor

    async def run_once(self) -> Backlog:
        limit = self.settings.count_limit
        backlog = await self._store.backlog(self.shard_count, limit)
        self._observer.backlog(backlog)
        if self.settings.tenant_top:
            by_tenant = await self._store.backlog_by_tenant(
                self.settings.tenant_top, self.shard_count, limit
            )
            self._observer.tenant_backlog(by_tenant)
        return backlog

    async def run(self) -> None:
        def failed(exc: Exception) -> None:
            log.debug("gauge refresh failed", extra={"error": str(exc)})

        async def refresh() -> None:
            if not self._standing_by():
                await self.run_once()

        await every(
            self._sup,
            self.settings.interval_s,
            refresh,
            failed=failed,
            errors=(StoreUnavailable,),
        )
