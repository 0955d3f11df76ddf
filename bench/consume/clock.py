"""How bench/consumer_throughput.py times a contender: from the first record taken up to the
commit of the last event's transaction, around consumer_lib's Database for consumer_lib."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from consumer_lib import Database, DeadLetterRow, Handler, Work


@dataclass
class Clock:
    """When the first record was taken up and when the total-th transaction committed."""

    total: int
    first: float | None = None
    last: float | None = None
    count: int = 0

    def __post_init__(self) -> None:
        self.done = asyncio.Event()

    def start(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def committed(self, events: int = 1) -> None:
        self.count += events
        if self.count >= self.total and self.last is None:
            self.last = time.perf_counter()
            self.done.set()

    def rate(self) -> float:
        if self.first is None or self.last is None:
            raise RuntimeError("the clock did not run")
        return self.total / (self.last - self.first)


class ClockedDatabase:
    """consumer_lib's Database with the clock around each transaction (one call and a
    counter more)."""

    def __init__(self, inner: Database, clock: Clock) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.async_handlers = inner.async_handlers
        self.clock = clock

    async def apply_work(self, work: Work) -> None:
        self.clock.start()
        await self.inner.apply_work(work)
        self.clock.committed(len(work.jobs))

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        self.clock.start()
        applied = await self.inner.apply(group, event_id, call, event)
        self.clock.committed()
        return applied

    async def purge(self, group: str, retention_s: float, limit: int) -> int:
        return await self.inner.purge(group, retention_s, limit)

    async def keep_dead_letter(self, letter: DeadLetterRow) -> None:
        await self.inner.keep_dead_letter(letter)

    async def close(self) -> None:
        await self.inner.close()
