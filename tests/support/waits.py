"""One way for a test to wait: for a condition, with a deadline as its only timeout."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def until(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    *,
    interval: float = 0.1,
    state: Callable[[], object] | None = None,
    alive: Callable[[], None] | None = None,
    blocking: bool = False,
) -> Any:
    """Call check() until it returns something truthy and return that; fail after timeout.

    What check() returns is awaited when it is awaitable; a blocking check (one that reads
    a database with a plain driver) runs in a thread so the loop it waits on goes on.
    alive() may raise to fail early (a child process died); state() describes the
    situation in the failure message.
    """
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        last = await asyncio.to_thread(check) if blocking else check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() > deadline:
            detail = f"\n{state()}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        await asyncio.sleep(interval)
