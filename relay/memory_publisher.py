"""An in-memory Publisher for tests: keeps what was acked, with injectable failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from relay.errors import PublishFailed
from relay.publisher import OutgoingRecord

FailureRule = Callable[[OutgoingRecord], PublishFailed | None]


@dataclass
class MemoryPublisher:
    """In-memory test double: keeps what was acked, in ack order.

    `refuse` refuses a record at hand-over (like a batch the producer rejects up front;
    later records of its key are refused with it); `fail` fails the ack (like a broker
    error). Both return None to let a record through.
    """

    sent: list[OutgoingRecord] = field(default_factory=list)
    refuse: FailureRule | None = None
    fail: FailureRule | None = None
    started: bool = False
    recreated: int = 0

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.started = False

    async def recreate(self) -> None:
        self.recreated += 1
        self.started = True

    async def enqueue_batch(
        self, records: Sequence[OutgoingRecord]
    ) -> list[Awaitable[None] | PublishFailed]:
        results: list[Awaitable[None] | PublishFailed] = []
        refused_keys: dict[tuple[str, bytes], PublishFailed] = {}
        for record in records:
            refused = refused_keys.get((record.topic, record.key))
            if refused is None and self.refuse:
                refused = self.refuse(record)
            if refused is not None:
                # As KafkaPublisher: later records of a refused key are not handed over.
                refused_keys[(record.topic, record.key)] = refused
                results.append(refused)
            else:
                results.append(self._ack(record, self.fail(record) if self.fail else None))
        return results

    async def _ack(self, record: OutgoingRecord, error: PublishFailed | None) -> None:
        await asyncio.sleep(0)
        if error is not None:
            raise error
        self.sent.append(record)
