"""Postgres connection pools that come back within seconds of a long outage ending.

psycopg_pool retries a failed connection with a delay that doubles, uncapped, until
reconnect_timeout: with the hour we used to give it, the attempt after a 20-minute outage
could come 17 minutes after the server was back. Here the window is short and, each time
it runs out, a new one starts, so attempts stay a few seconds apart however long the
server is away. Used by the relay's store and consumer_lib's PsycopgAsync.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

RECONNECT_WINDOW_S = 10.0  # attempts at about 0, 1, 3, 7 and 10 s, then again


async def _start_over(pool: AsyncConnectionPool[Any]) -> None:
    if pool.closed:
        return
    # check() lets a pool that has lost its connections grow again: a new attempt, whose
    # delay starts at one second.
    with contextlib.suppress(Exception):
        await pool.check()


def reconnecting_pool(
    conninfo: str,
    *,
    max_size: int,
    timeout: float,
    check: Callable[[AsyncConnection[Any]], Awaitable[None]] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> AsyncConnectionPool[Any]:
    """An unopened pool (open it in the running loop, without waiting: a first
    connection that times out in open(wait=True) closes a psycopg pool for good)."""
    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        timeout=timeout,
        check=check,
        kwargs=kwargs,
        open=False,
        reconnect_timeout=RECONNECT_WINDOW_S,
        reconnect_failed=_start_over,
    )
