"""An in-memory Publisher for tests: keeps what was acked, with injectable failures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from relay.errors import PublishFailed
from relay.publisher import HELD, Handed, HeldBack, OutgoingRecord

FailureRule = Callable[[OutgoingRecord], PublishFailed | None]


@dataclass
class MemoryPublisher:
    """In-memory test double: keeps what was acked, in ack order.

    As with Kafka, a key's records of one call travel together (one record batch): they
    share one ack, failed for all of them when `fail` fails any. `refuse` refuses a record
    at hand-over (like a batch the producer rejects up front; later records of its key are
    refused with it); `fail` fails the ack (like a broker error). Both return None to let a
    record through.
    """

    sent: list[OutgoingRecord] = field(default_factory=list)
    refuse: FailureRule | None = None
    fail: FailureRule | None = None
    max_key_records: int | None = None
    started: bool = False
    recreated: int = 0

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.started = False

    async def recreate(self) -> None:
        self.recreated += 1
        self.started = True

    async def enqueue_batch(self, records: Sequence[OutgoingRecord]) -> list[Handed]:
        refused_keys: dict[tuple[str, bytes], PublishFailed] = {}
        batches: dict[tuple[str, bytes], list[OutgoingRecord]] = {}
        errors: dict[tuple[str, bytes], PublishFailed | None] = {}
        handed: list[PublishFailed | HeldBack | tuple[str, bytes]] = []
        for record in records:
            key = (record.topic, record.key)
            refused = refused_keys.get(key)
            if refused is None and self.refuse:
                refused = self.refuse(record)
            if refused is not None:
                # As KafkaPublisher: later records of a refused key are not handed over.
                refused_keys[key] = refused
                handed.append(refused)
                continue
            batch = batches.setdefault(key, [])
            if self.max_key_records is not None and len(batch) >= self.max_key_records:
                handed.append(HELD)
                continue
            batch.append(record)
            if errors.get(key) is None:
                errors[key] = self.fail(record) if self.fail else None
            handed.append(key)
        acks = {key: asyncio.ensure_future(self._ack(b, errors[key])) for key, b in batches.items()}
        return [
            item if isinstance(item, PublishFailed | HeldBack) else acks[item] for item in handed
        ]

    async def _ack(self, batch: list[OutgoingRecord], error: PublishFailed | None) -> None:
        await asyncio.sleep(0)
        if error is not None:
            raise error
        self.sent.extend(batch)
