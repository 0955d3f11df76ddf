"""Publishing records: one Protocol and the aiokafka implementation (the in-memory test
double is memory_publisher.MemoryPublisher).

A send is two steps, as in Kafka clients: `enqueue_batch` hands records to the producer
and returns, per record, an awaitable for its ack; or at once a PublishFailed when the
record cannot be handed over (its topic unknown to the cluster, or too large for it); or
HELD when it must wait for a later call. The relay enqueues a whole claim, then gathers
the acks.

Per-key order: the records of one key in one call travel in one record batch, which Kafka
accepts or refuses as a whole, so a later record of a key can never be acked after an
earlier one failed. A key whose records would span two record batches keeps the later
ones HELD: they go out with the next claim, after the earlier ones were acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder

from outbox_core.kafka_security import KafkaSecurity
from relay.errors import PublishFailed
from relay.kafka_errors import SIZE_ERRORS, classify
from relay.kafka_settings import KafkaSettings
from relay.loop_share import PIECE
from relay.topic_limits import TopicLimits


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


class HeldBack:
    """A record not handed over in this call (see the module's note on per-key order).
    It is no failure: its row stays pending, uncharged, for the next claim."""

    def __repr__(self) -> str:
        return "HELD"


HELD = HeldBack()
Handed = Awaitable[None] | PublishFailed | HeldBack

# Bytes a record adds to a batch beyond its key, value and headers (length varints,
# attributes, deltas), and a record batch's own header: a record larger than a topic's
# batch size minus these could never be accepted by the broker.
RECORD_OVERHEAD = 64
BATCH_HEADER = 61


class Publisher(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def recreate(self) -> None:
        """Replace a producer broken by a fatal error (not the process)."""
        ...

    async def enqueue_batch(self, records: Sequence[OutgoingRecord]) -> list[Handed]:
        """Per record: its ack, a PublishFailed, or HELD. Nothing later of a refused
        record's key is handed over behind it, and a key's records of one call are acked
        or failed together."""
        ...


class KafkaPublisher:
    def __init__(self, settings: KafkaSettings, security: KafkaSecurity) -> None:
        self._settings = settings
        self._security = security
        self._producer: AIOKafkaProducer | None = None
        self._limits = TopicLimits(self._make_admin, settings.max_request_size)

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
        )

    def _make_admin(self) -> AIOKafkaAdminClient:
        s = self._settings
        return AIOKafkaAdminClient(
            bootstrap_servers=s.bootstrap_servers,
            client_id=f"{s.client_id}-admin",
            request_timeout_ms=s.request_timeout_ms,
            **self._security.client_options(),
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
        await self._limits.close()

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    async def _partitions(
        self, producer: AIOKafkaProducer, topics: set[str]
    ) -> dict[str, list[int] | PublishFailed]:
        found: dict[str, list[int] | PublishFailed] = {}
        for topic in topics:
            try:
                found[topic] = sorted(await producer.client._wait_on_metadata(topic))
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                found[topic] = classify(exc)
        return found

    def _builder(self, producer: AIOKafkaProducer, size: int) -> BatchBuilder:
        # The producer's own builders have one size for every topic; ours fit each topic.
        compression = producer._message_accumulator._compression_type
        return BatchBuilder(size, compression, is_transactional=False)

    async def enqueue_batch(self, records: Sequence[OutgoingRecord]) -> list[Handed]:
        """One record batch per partition (more when a partition's records exceed the
        topic's limit), each closed before it is submitted unless a linger is set: the
        claim is the batch. One shared ack per record batch (aiokafka's batch API)."""
        producer = self._producer
        if producer is None:
            raise PublishFailed("producer is not started", retriable=True, fatal=True)
        results: list[Handed] = [HELD] * len(records)
        topics = {r.topic for r in records}
        partitions = await self._partitions(producer, topics)
        sizes = await self._limits.batch_bytes(topics)
        if self._settings.max_batch_bytes is not None:
            sizes = {t: min(size, self._settings.max_batch_bytes) for t, size in sizes.items()}
        groups: dict[tuple[str, int], list[tuple[int, OutgoingRecord]]] = {}
        for i, record in enumerate(records):
            known = partitions[record.topic]
            if isinstance(known, PublishFailed):
                results[i] = known
                continue
            partition = known[_key_slot(record.key) % len(known)]
            group = groups.get((record.topic, partition))
            if group is None:
                groups[record.topic, partition] = [(i, record)]
            else:
                group.append((i, record))
        for (topic, partition), items in groups.items():
            await self._enqueue_partition(producer, topic, partition, sizes[topic], items, results)
        return results

    async def _enqueue_partition(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        partition: int,
        size: int,
        items: list[tuple[int, OutgoingRecord]],
        results: list[Handed],
    ) -> None:
        largest = size - BATCH_HEADER - RECORD_OVERHEAD
        builder, members, start = self._builder(producer, size), list[int](), 0
        # Keys whose later records wait for the next call: in a batch already submitted
        # by this call, or refused as too large.
        held: set[bytes] = set()
        for n, (i, record) in enumerate(items):
            if n and not n % PIECE:
                await asyncio.sleep(0)  # loop_share: the other lane's turn
            if held and record.key in held:
                continue  # HELD: its key's earlier records are in a batch of their own
            # A builder takes any first record, however large; only a first record needs
            # its size checked (a later one that does not fit starts the next batch).
            if members and _append(builder, record) is None:  # full: submit it
                failed = await self._submit(producer, builder, topic, partition, members, results)
                if failed is not None:
                    # Nothing later of this partition may overtake the refused batch.
                    for j, _ in items[n:]:
                        results[j] = failed
                    return
                # The submitted batch's keys (items since it began; those skipped there
                # were held already).
                held.update(earlier.key for _, earlier in items[start:n])
                builder, members, start = self._builder(producer, size), [], n
                if record.key in held:
                    continue  # HELD
            if not members:
                if record.size > largest:
                    # Its later records are HELD, not refused: they are not too large, and
                    # whether they may go ahead of it is the failure policy's to decide.
                    held.add(record.key)
                    results[i] = PublishFailed(
                        f"RecordTooLarge: record of {record.size} bytes exceeds what topic "
                        f"{topic} accepts (max.message.bytes {size})",
                        retriable=False,
                    )
                    continue
                _append(builder, record)
            members.append(i)
        if members:
            await self._submit(producer, builder, topic, partition, members, results)

    async def _submit(
        self,
        producer: AIOKafkaProducer,
        builder: BatchBuilder,
        topic: str,
        partition: int,
        members: list[int],
        results: list[Handed],
    ) -> PublishFailed | None:
        if self._settings.linger_ms == 0:
            builder.close()  # ready to send at once (aiokafka lingers over open batches)
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
        shared = _ack(fut, limit_s, lambda: self._limits.forget(topic))
        for i in members:
            results[i] = shared
        return None


def _append(builder: BatchBuilder, record: OutgoingRecord) -> Any:
    return builder.append(
        timestamp=None, key=record.key, value=record.value, headers=record.headers
    )


@functools.lru_cache(maxsize=65536)
def _key_slot(key: bytes) -> int:
    # Kafka's default partitioner (murmur2 of the key, positive): the partition a key maps
    # to stays the one every other Kafka producer would pick. aiokafka's murmur2 is pure
    # Python, and keys repeat, so each is hashed once.
    return int(murmur2(key)) & 0x7FFFFFFF


def _ack(
    fut: asyncio.Future[Any], limit_s: float, size_error: Callable[[], None]
) -> asyncio.Future[None]:
    """The batch's ack: aiokafka's outcome with its error translated, or a PublishFailed
    after limit_s. Callbacks and a timer, not a task with wait_for: a cycle sends a batch
    per partition, and each task would cost the event loop several more iterations."""
    loop = asyncio.get_running_loop()
    ack: asyncio.Future[None] = loop.create_future()

    def settle(done: asyncio.Future[Any]) -> None:
        if ack.done():
            return
        if done.cancelled():
            ack.set_exception(PublishFailed("send cancelled", retriable=True, fatal=True))
            return
        exc = done.exception()
        if exc is None:
            ack.set_result(None)
            return
        if isinstance(exc, SIZE_ERRORS):
            size_error()  # the topic's limit changed: read it again
        ack.set_exception(classify(exc))

    def expire() -> None:
        if not ack.done():
            ack.set_exception(
                PublishFailed(
                    f"no ack from Kafka within {limit_s:.0f}s", retriable=True, fatal=True
                )
            )

    timer = loop.call_later(limit_s, expire)
    ack.add_done_callback(lambda _: timer.cancel())
    fut.add_done_callback(settle)
    return ack
