"""Retention: kept published rows (retention=keep) leave by whole partitions on Postgres
(outbox_published, dropped past the retention: no dead tuples), and by small batches of
deletes where a partition cannot hold them (SQLite, the DEFAULT partition, rows an older
relay marked in outbox_events); old idempotency keys by small batches, so no statement
holds many row locks for long. `run_once` is one round."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from outbox_core.periodic import every
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.store import MOVE_MAX_BYTES, Rotated, Rotation, Store

log = logging.getLogger("relay.purge")

# Between two tries of a partition whose lock a settle held: long enough for one settle of
# an ordinary cycle to end, short enough for many tries in a round.
ROTATE_RETRY_S = 0.02


class PurgeSettings(SettingsGroup):
    retention: Literal["keep", "delete"] = Field(
        default="keep",
        description="keep published rows for retention_period_s (replay and audit need them; "
        "on Postgres in the history table outbox_published, large ones marked in "
        "outbox_events), or delete them at once (a little faster).",
    )
    retention_move_max_bytes: int = Field(
        default=MOVE_MAX_BYTES,
        ge=0,
        description="retention=keep on Postgres: a published row whose payload is at most "
        "this many bytes moves into the history table (outbox_published); a larger one stays "
        "in outbox_events, marked published, until the purge deletes it after "
        "retention_period_s. Moving copies the payload inside the database (its TOAST and "
        "its WAL written again), which made large events drain at half the rate of "
        "retention=delete; marking writes one small row version (docs/tuning.md).",
    )
    retention_period_s: float = Field(
        default=7 * 24 * 3600.0,
        ge=0,
        allow_inf_nan=False,
        description="How long kept rows stay (retention=keep); a row stays at most this plus "
        "one partition's width (retention_period_s / 8, between 1 s and a day).",
    )
    purge_lock_timeout_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        allow_inf_nan=False,
        description="How long a purge round keeps trying to create or drop a partition of "
        "kept rows before it leaves that partition to its next round. Each try takes the "
        "table's lock only if no settle holds it at that moment, so settles never wait for "
        "a try, only for the few milliseconds a partition takes to create or drop.",
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

    @property
    def rotation(self) -> Rotation:
        """The partitions of kept rows (Postgres): each spans an eighth of the retention,
        between 1 s and a day, so a row stays at most retention + width and about ten
        partitions are alive. They are made ahead for two rounds and two widths: a round
        that cannot run once (a lock it could not have) still finds the next partition
        there."""
        width = int(min(max(self.retention_period_s / 8, 1.0), 86400.0))
        ahead = int(min(2 * width + 2 * self.purge_interval_s, 64 * width))
        timeout_ms = max(1, round(self.purge_lock_timeout_s * 1000))
        return Rotation(self.retention_period_s, width, ahead, timeout_ms)


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
        if s.keep and not self._standing_by():
            try:
                rotated = await self._rotate()
            except StoreUnavailable as exc:
                # The batches below still run: a failed rotation costs its round only (the
                # DEFAULT partition takes what no partition covers meanwhile).
                log.warning("partition rotation failed", extra={"error": str(exc)})
            else:
                self._rotated(rotated)
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

    async def _rotate(self) -> Rotated:
        """The partition maintenance, tried again while a partition could not have its
        lock (a settle held it), until purge_lock_timeout_s has passed. While a backlog
        drains, a settle is in flight most of the time, not all of it."""
        s = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.purge_lock_timeout_s
        created = dropped = 0
        while True:
            rotated = await self._store.rotate_published(s.rotation)
            created += rotated.created
            dropped += rotated.dropped
            if not rotated.skipped or loop.time() >= deadline or self._sup.stopping.is_set():
                return Rotated(created, dropped, rotated.skipped)
            await self._sup.sleep(min(ROTATE_RETRY_S, max(0.0, deadline - loop.time())))

    @staticmethod
    def _rotated(rotated: Rotated) -> None:
        if rotated.created or rotated.dropped or rotated.skipped:
            log.debug(
                "partitions rotated",
                extra={
                    "created": rotated.created,
                    "dropped": rotated.dropped,
                    "skipped": rotated.skipped,
                },
            )

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
