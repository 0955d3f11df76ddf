"""An in-memory Publisher for tests: keeps what was acked, with injectable failures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from relay.transport.errors import PublishFailed
from relay.transport.protocol import ACKED, HELD, Outcome
from relay.transport.records import OutgoingRecord

FailureRule = Callable[[OutgoingRecord], PublishFailed | None]


@dataclass
class MemoryPublisher:
    """In-memory test double: keeps what was acked, in ack order.

    As with Kafka, a key's records of one call travel together (one record batch): they
    are acked together, or failed together when `fail` fails any. `refuse` refuses a record
    at hand-over (like a batch the producer rejects up front; later records of its key are
    HELD behind it); `fail` fails the ack (like a broker error). Both return None to let a
    record through. A key's records past `max_key_records` in one call are HELD (like a
    Kafka key that would span two record batches).
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

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        refused_keys: set[tuple[str, bytes]] = set()
        batches: dict[tuple[str, bytes], list[OutgoingRecord]] = {}
        errors: dict[tuple[str, bytes], PublishFailed | None] = {}
        handed: list[Outcome | tuple[str, bytes]] = []
        for record in records:
            key = (record.topic, record.key)
            if key in refused_keys:
                handed.append(HELD)  # as KafkaPublisher: nothing of a key behind a refusal
                continue
            refused = self.refuse(record) if self.refuse else None
            if refused is not None:
                refused_keys.add(key)
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
        await asyncio.sleep(0)  # the acks come later, as a broker's do
        answers: dict[tuple[str, bytes], Outcome] = {}
        for key, batch in batches.items():
            error = errors[key]
            if error is None:
                self.sent.extend(batch)
            answers[key] = ACKED if error is None else error
        return [answers[item] if isinstance(item, tuple) else item for item in handed]
