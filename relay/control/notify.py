"""Optional wake-up hints on Postgres: LISTEN on the channel producers NOTIFY.

Producers built with Outbox(notify_channel=...) send pg_notify(channel, shard) in the
insert statement; Postgres folds identical notifications of one transaction into one,
so a hint costs one message per transaction and shard, never one per row. The hint only
shortens an idle shard's wait: polling alone is correct. When the listening connection
dies, it is opened again with backoff. Any role may NOTIFY the channel: a payload that is
not a shard number is ignored (logged at most once a minute), never trusted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql
from pydantic import Field

from outbox_core.backoff import Backoff
from outbox_core.queries import query
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor

log = logging.getLogger("relay.notify")

# Lets operators (and tests) find the listening connection in pg_stat_activity.
APPLICATION_NAME = "outbox-relay-notify"


class NotifySettings(SettingsGroup):
    listen_notify: bool = Field(
        default=False,
        description="Postgres: LISTEN for producers' coalesced NOTIFY hints (never required).",
    )
    notify_channel: str = Field(
        default="outbox_events", pattern=r"^[a-z_][a-z0-9_]{0,62}$", description="NOTIFY channel."
    )


_MAX_SHARD = 32767  # the shard column is a smallint
_IGNORED_LOG_EVERY_S = 60.0


class _Payloads:
    """Notification payloads to shards; the malformed ones counted and logged sparingly."""

    def __init__(self) -> None:
        self.ignored = 0
        self._logged_at = -_IGNORED_LOG_EVERY_S

    def shard(self, payload: str) -> int | None:
        # isdigit() alone accepts "²" and other digits int() refuses.
        if payload.isascii() and payload.isdigit() and int(payload) <= _MAX_SHARD:
            return int(payload)
        self.ignored += 1
        now = time.monotonic()
        if now - self._logged_at >= _IGNORED_LOG_EVERY_S:
            self._logged_at = now
            log.warning(
                "ignoring notify payloads that are not a shard number",
                extra={"payload": ascii(payload[:64]), "ignored": self.ignored},
            )
        return None


async def listen(
    conninfo: str,
    settings: NotifySettings,
    *,
    supervisor: Supervisor,
    wake: Callable[[int | None], None],
    connect_kwargs: Mapping[str, Any] | None = None,
) -> None:
    """connect_kwargs: libpq parameters (TCP keepalives: a listener on a connection that
    died silently would wait for hints forever)."""
    stopping = supervisor.stopping
    backoff = Backoff(base_s=0.5, max_s=30.0)
    payloads = _Payloads()
    while not stopping.is_set():
        try:
            conn = await psycopg.AsyncConnection.connect(
                conninfo,
                autocommit=True,
                connect_timeout=10,
                application_name=APPLICATION_NAME,
                **(connect_kwargs or {}),
            )
            async with conn:
                listen_sql = sql.SQL(query("postgres", "notify_listen"))
                await conn.execute(
                    listen_sql.format(channel=sql.Identifier(settings.notify_channel))
                )
                log.info("listening for notify hints", extra={"channel": settings.notify_channel})
                backoff.reset()
                wake(None)  # anything committed while we were not listening
                async for note in conn.notifies():
                    shard = payloads.shard(note.payload)
                    if shard is not None:
                        wake(shard)
                    if stopping.is_set():
                        break
        except (psycopg.Error, OSError) as exc:
            log.warning(
                "notify listener lost its connection; reconnecting",
                extra={"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__},
            )
            await supervisor.sleep(backoff.next_s())
