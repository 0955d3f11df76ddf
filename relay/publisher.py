"""Publishing records: one Protocol, the aiokafka implementation and an in-memory double.

A send is two steps, as in Kafka clients: `enqueue` hands the record to the producer and
returns a future for its ack; it raises at once when the record can never be sent
(too large for the producer). The relay enqueues a whole batch, then gathers the acks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

from relay.config import RelaySettings
from relay.errors import PublishFailed

# The producer instance is unusable after these; a new one (new producer id) is needed.
_FATAL = (
    kafka_errors.ProducerClosed,
    kafka_errors.OutOfOrderSequenceNumber,
    kafka_errors.ProducerFenced,
    kafka_errors.IllegalStateError,
)

# aiokafka marks a batch that expired while the broker was away (KafkaTimeoutError) as
# not retriable; for the relay it is the broker being unreachable, which is.
_TRANSPORT = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError)


@dataclass(frozen=True)
class OutgoingRecord:
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        return len(self.key) + len(self.value) + sum(len(k) + len(v) for k, v in self.headers)


class Publisher(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def recreate(self) -> None:
        """Replace a producer broken by a fatal error (not the process)."""
        ...

    async def enqueue(self, record: OutgoingRecord) -> Awaitable[None]: ...


def classify(exc: BaseException) -> PublishFailed:
    """Kafka client errors -> PublishFailed with aiokafka's own `retriable` verdict."""
    if isinstance(exc, PublishFailed):
        return exc
    name = type(exc).__name__
    text = f"{name}: {exc}".strip().rstrip(":")
    if isinstance(exc, _FATAL):
        return PublishFailed(text, retriable=True, fatal=True)
    if isinstance(exc, _TRANSPORT):
        return PublishFailed(text, retriable=True)
    if isinstance(exc, kafka_errors.KafkaError):
        return PublishFailed(text, retriable=bool(getattr(exc, "retriable", False)))
    if isinstance(exc, asyncio.TimeoutError | OSError):
        return PublishFailed(text, retriable=True)
    return PublishFailed(text, retriable=False)


class KafkaPublisher:
    def __init__(self, settings: RelaySettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    def _make(self) -> AIOKafkaProducer:
        s = self._settings
        return AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap_servers,
            client_id=s.kafka_client_id,
            acks="all",
            enable_idempotence=True,
            max_request_size=s.kafka_max_request_size,
            linger_ms=s.kafka_linger_ms,
            request_timeout_ms=s.kafka_request_timeout_ms,
            compression_type=None
            if s.kafka_compression_type == "none"
            else s.kafka_compression_type,
            # Larger batches: fewer requests, and a key's records more often share one.
            max_batch_size=256 * 1024,
        )

    async def start(self) -> None:
        producer = self._make()
        try:
            await producer.start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise classify(exc) from exc
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    async def enqueue(self, record: OutgoingRecord) -> Awaitable[None]:
        if self._producer is None:
            raise PublishFailed("producer is not started", retriable=True, fatal=True)
        try:
            fut: asyncio.Future[Any] = await self._producer.send(
                record.topic, record.value, key=record.key, headers=record.headers
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise classify(exc) from exc
        return _ack(fut)


async def _ack(fut: asyncio.Future[Any]) -> None:
    try:
        await fut
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise classify(exc) from exc


FailureRule = Callable[[OutgoingRecord], PublishFailed | None]


@dataclass
class MemoryPublisher:
    """In-memory test double: keeps what was acked, in ack order.

    `refuse` raises at enqueue (like a record the producer rejects up front); `fail`
    fails the ack (like a broker error). Both return None to let a record through.
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

    async def enqueue(self, record: OutgoingRecord) -> Awaitable[None]:
        refused = self.refuse(record) if self.refuse else None
        if refused is not None:
            raise refused
        return self._ack(record, self.fail(record) if self.fail else None)

    async def _ack(self, record: OutgoingRecord, error: PublishFailed | None) -> None:
        await asyncio.sleep(0)
        if error is not None:
            raise error
        self.sent.append(record)
