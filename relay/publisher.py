"""Publishing records: one Protocol and the aiokafka implementation (the in-memory test
double is memory_publisher.MemoryPublisher).

A send is two steps, as in Kafka clients: `enqueue_batch` hands records to the producer
and returns, per record, an awaitable for its ack, or at once a PublishFailed when the
record cannot be handed over (its topic unknown to the cluster). The relay enqueues a
whole claim batch, then gathers the acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Sequence
from typing import Any, NamedTuple, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.partitioner import murmur2

from outbox_core.kafka_security import KafkaSecurity
from relay.errors import PublishFailed
from relay.kafka_settings import KafkaSettings

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
# Retriable, but about one topic: charged to its rows (with backoff, then parked) so that a
# missing topic cannot hold a whole shard back.
_TOPIC_LEVEL = (kafka_errors.UnknownTopicOrPartitionError, kafka_errors.NotEnoughReplicasError)


class OutgoingRecord(NamedTuple):
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        size = len(self.key) + len(self.value)
        for name, value in self.headers:
            size += len(name) + len(value)
        return size


class Publisher(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def recreate(self) -> None:
        """Replace a producer broken by a fatal error (not the process)."""
        ...

    async def enqueue_batch(
        self, records: Sequence[OutgoingRecord]
    ) -> list[Awaitable[None] | PublishFailed]:
        """Per record, its ack or a PublishFailed. A refused record's later records of the
        same key (same topic and partition) are refused too, never handed over behind it."""
        ...


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
    if isinstance(exc, _TOPIC_LEVEL):
        return PublishFailed(text, retriable=True, transport=False)
    if isinstance(exc, kafka_errors.KafkaError):
        return PublishFailed(text, retriable=bool(getattr(exc, "retriable", False)))
    if isinstance(exc, asyncio.TimeoutError | OSError):
        return PublishFailed(text, retriable=True)
    return PublishFailed(text, retriable=False)


class KafkaPublisher:
    def __init__(self, settings: KafkaSettings, security: KafkaSecurity) -> None:
        self._settings = settings
        self._security = security
        self._producer: AIOKafkaProducer | None = None

    def _make(self) -> AIOKafkaProducer:
        s = self._settings
        return AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=s.client_id,
            acks="all",
            enable_idempotence=True,
            max_request_size=s.max_request_size,
            linger_ms=s.linger_ms,
            request_timeout_ms=s.request_timeout_ms,
            compression_type=None if s.compression_type == "none" else s.compression_type,
            **self._security.client_options(),
            # Kafka's default batch.size. The broker judges a record batch as a whole
            # against the topic's max.message.bytes and aiokafka never splits a rejected
            # batch, so a larger batch could fail every record in it on a topic with a
            # smaller limit (parking rows of unrelated keys). A record larger than this
            # goes alone in its own batch, so a size rejection names exactly that record.
            max_batch_size=s.max_batch_bytes,
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

    async def enqueue_batch(
        self, records: Sequence[OutgoingRecord]
    ) -> list[Awaitable[None] | PublishFailed]:
        """Build one record batch per partition and submit it; one shared ack per batch.

        This is aiokafka's batch API: it skips the per-record send() path, and the records
        of one key (one partition) in a claim usually travel in one batch, which Kafka
        accepts or rejects as a whole.
        """
        producer = self._producer
        if producer is None:
            raise PublishFailed("producer is not started", retriable=True, fatal=True)
        results: list[Awaitable[None] | PublishFailed] = [
            PublishFailed("not sent", retriable=True)
        ] * len(records)
        partitions: dict[str, list[int] | PublishFailed] = {}
        for topic in {r.topic for r in records}:
            try:
                partitions[topic] = sorted(await producer.client._wait_on_metadata(topic))
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                partitions[topic] = classify(exc)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, record in enumerate(records):
            known = partitions[record.topic]
            if isinstance(known, PublishFailed):
                results[i] = known
                continue
            partition = known[_key_slot(record.key) % len(known)]
            groups.setdefault((record.topic, partition), []).append(i)
        for (topic, partition), indexes in groups.items():
            builder, members = producer.create_batch(), list[int]()
            for n, i in enumerate(indexes):
                record = records[i]
                if (
                    builder.append(
                        timestamp=None, key=record.key, value=record.value, headers=record.headers
                    )
                    is None
                ):
                    refused = await self._submit(
                        producer, builder, topic, partition, members, results
                    )
                    if refused is not None:
                        # Nothing later of this partition may overtake the refused batch.
                        for j in indexes[n:]:
                            results[j] = refused
                        break
                    builder, members = producer.create_batch(), list[int]()
                    builder.append(
                        timestamp=None, key=record.key, value=record.value, headers=record.headers
                    )
                members.append(i)
            else:
                await self._submit(producer, builder, topic, partition, members, results)
        return results

    async def _submit(
        self,
        producer: AIOKafkaProducer,
        builder: Any,
        topic: str,
        partition: int,
        members: list[int],
        results: list[Awaitable[None] | PublishFailed],
    ) -> PublishFailed | None:
        try:
            fut = await producer.send_batch(builder, topic, partition=partition)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            failed = classify(exc)
            for i in members:
                results[i] = failed
            return failed
        # Every healthy batch is acked or expired by aiokafka within about two request
        # timeouts; a batch appended while its producer was being stopped (recreated)
        # is never sent nor failed, and its shard would wait for it forever.
        limit_s = 3 * self._settings.request_timeout_ms / 1000
        shared = asyncio.ensure_future(_ack(fut, limit_s))
        for i in members:
            results[i] = shared
        return None


@functools.lru_cache(maxsize=65536)
def _key_slot(key: bytes) -> int:
    # Kafka's default partitioner (murmur2 of the key, positive): the partition a key maps
    # to stays the one every other Kafka producer would pick. aiokafka's murmur2 is pure
    # Python, and keys repeat, so each is hashed once.
    return int(murmur2(key)) & 0x7FFFFFFF


async def _ack(fut: asyncio.Future[Any], limit_s: float) -> None:
    try:
        await asyncio.wait_for(fut, limit_s)
    except TimeoutError:
        raise PublishFailed(
            f"no ack from Kafka within {limit_s:.0f}s", retriable=True, fatal=True
        ) from None
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise classify(exc) from exc
