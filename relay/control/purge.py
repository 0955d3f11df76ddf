"""Retention: published rows (retention=keep) and old idempotency keys are removed in small
batches, so no statement holds many row locks for long. `run_once` is one round."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from outbox_core.periodic import every
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.store import Store

log = logging.getLogger("relay.purge")


class PurgeSettings(SettingsGroup):
    retention: Literal["keep", "delete"] = Field(
        default="keep",
        description="keep published rows, marked published, for retention_period_s (replay "
        "and audit need them), or delete them at once (a little faster).",
    )
    retention_period_s: float = Field(
        default=7 * 24 * 3600.0, ge=0, description="How long kept rows stay (retention=keep)."
    )
    idempotency_retention_s: float = Field(
        default=7 * 24 * 3600.0, ge=0, description="How long idempotency keys are remembered."
    )
    purge_interval_s: float = Field(default=30.0, gt=0, description="Time between purge rounds.")
    purge_batch_size: int = Field(
        default=1000, ge=1, description="Rows deleted per purge statement."
    )

    @property
    def keep(self) -> bool:
        return self.retention == "keep"


class Purger:
    def __init__(
        self,
        settings: PurgeSettings,
        *,
        store: Store,
        supervisor: Supervisor,
        standing_by: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self._store = store
        self._sup = supervisor
        # A standby leaves the fleet-wide purge to the active replicas.
        self._standing_by = standing_by

    async def run_once(self) -> int:
        """Purge until a batch comes back short (or stopping); returns the rows removed."""
        s = self.settings
        total = 0
        while not self._sup.stopping.is_set() and not self._standing_by():
            removed = await self._store.purge(
                s.retention_period_s if s.keep else 0.0,
                s.idempotency_retention_s,
                s.purge_batch_size,
            )
            total += removed
            if removed < s.purge_batch_size:
                break
        if total:
            log.debug("purged", extra={"rows": total})
        return total

    async def run(self) -> None:
        def failed(exc: Exception) -> None:
            log.warning("purge failed", extra={"error": str(exc)})

        await every(
            self._sup,
            self.settings.purge_interval_s,
            self.run_once,
            failed=failed,
            errors=(StoreUnavailable,),
        )
