"""Publishing to Kafka with aiokafka's batch API, and the one place aiokafka's errors
become the relay's (classify).

Each claim becomes one record batch per partition (more when a partition's records exceed
the topic's limit), each closed before it is submitted unless a linger is set: the claim is
the batch. A record batch is acked or refused as a whole, with one shared ack.

Nothing here waits for a topic. Its partitions come from the producer's metadata and its
limit from topic_limits, both at once; what they do not know yet is looked up beside the
cycle (aiokafka_adapter.TopicDirectory, TopicLimits), and meanwhile only that topic's
records wait (HELD) or, once the topic is known to be missing or denied, fail. The
largest record is the topic's limit (max.message.bytes, capped by max_request_size); a
record larger than a batch goes in a batch of its own, and while the limit is unknown
none is refused for its size. A batch of several records the broker refuses for its size
fails as BATCH_TOO_LARGE (uncharged): the topic's next batches are at most half as large,
until only a record too large alone is refused (TOO_LARGE, parked).

Per-key order: the records of one key in one call travel in one record batch, so a later
record of a key can never be acked after an earlier one failed. A key whose records would
span two record batches keeps the later ones HELD: they go out with the next claim, after
the earlier ones were acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from outbox_core.kafka_clients import stop_unsent_dropped
from outbox_core.kafka_faults import KafkaFault, fault_of
from outbox_core.kafka_security import KafkaSecurity
from outbox_core.supervisor import PIECE
from relay.transport.aiokafka_adapter import (
    BatchBuilder,
    TopicDirectory,
    TopicState,
    quick_transaction_retries,
    read_left_failures,
    record_batch,
)
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.protocol import ACKED, HELD, Outcome
from relay.transport.records import OutgoingRecord
from relay.transport.topic_limits import FALLBACK_BATCH_BYTES, TopicLimits

log = logging.getLogger("relay.topics")

# publish's trailer: the indexes of the records submitted -> a record to send after them.
Trailer = Callable[[list[int]], Sequence[OutgoingRecord]]

# Each Kafka fault (outbox_core.kafka_faults: the one table of aiokafka's errors) as the
# relay's reason; every reason's verdict is the fault's, but for TOPIC_DENIED.
_REASONS: dict[KafkaFault, FailureReason] = {
    KafkaFault.FENCED: FailureReason.FENCED,
    KafkaFault.PRODUCER_BROKEN: FailureReason.PRODUCER_BROKEN,
    KafkaFault.NOT_IN_TRANSACTION: FailureReason.TRANSACTION_ABORTED,
    KafkaFault.TOO_LARGE: FailureReason.TOO_LARGE,
    KafkaFault.INVALID_TOPIC: FailureReason.REFUSED,
    # Differs on purpose from consumer_lib.errors (_NEVER_TAKEN: NOT_AUTHORIZED, given
    # up): retriable here. A topic the relay may not write is the cluster's problem, not
    # the row's, and an event has nowhere else to go: its rows back off, uncharged (never
    # parked for it), until the ACL is granted. A dead letter the consumer may not write
    # has a place of its own (consumer_dead_letters), and waiting would hold its partition.
    KafkaFault.TOPIC_DENIED: FailureReason.TOPIC_DENIED,
    KafkaFault.CLUSTER_DENIED: FailureReason.REFUSED,
    # Retriable yet the topic's problem: charged to its rows (with backoff, then parked)
    # so that a missing topic cannot hold a whole shard back.
    KafkaFault.UNKNOWN_TOPIC: FailureReason.UNKNOWN_TOPIC,
    KafkaFault.TOPIC_UNAVAILABLE: FailureReason.TOPIC_UNAVAILABLE,  # uncharged, as TOPIC_DENIED
    KafkaFault.TIMEOUT: FailureReason.TIMEOUT,
    KafkaFault.UNREACHABLE: FailureReason.UNREACHABLE,
    KafkaFault.RETRIABLE: FailureReason.RETRIABLE,
    KafkaFault.REFUSED: FailureReason.REFUSED,
}


def classify(exc: BaseException) -> PublishFailed:
    """A Kafka client error as the relay's PublishFailed, its reason by the error's fault;
    an error that is not Kafka's is REFUSED."""
    if isinstance(exc, PublishFailed):
        return exc
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    fault = fault_of(exc)
    return PublishFailed(FailureReason.REFUSED if fault is None else _REASONS[fault], text)


# Bytes a record adds to a batch beyond its key, value and headers (length varints,
# attributes, deltas), and a record batch's own header: a record larger than a topic's
# batch size minus these could never be accepted by the broker.
RECORD_OVERHEAD = 64
BATCH_HEADER = 61
LOOKUP_WAIT_S = 0.1  # the most a cycle waits for a new topic's lookup or limit
SPLIT_FOR_S = 300.0  # how long a topic's batches stay halved after a size refusal

_WHY = {
    TopicState.MISSING: (FailureReason.UNKNOWN_TOPIC, "topic {} not found on the cluster"),
    TopicState.DENIED: (FailureReason.TOPIC_DENIED, "topic {} not authorized for this relay"),
    TopicState.INVALID: (FailureReason.REFUSED, "{!r} is not a legal Kafka topic name"),
}


class KafkaPublisher:
    def __init__(
        self,
        settings: KafkaSettings,
        security: KafkaSecurity,
        *,
        transactional_id: str | None = None,
    ) -> None:
        """transactional_id: a transactional producer (relay.transport.transactions runs
        its transactions); its start() is the init that fences the id's previous holder."""
        self._settings = settings
        self._security = security
        self.transactional_id = transactional_id
        self._producer: AIOKafkaProducer | None = None
        self._topics: TopicDirectory | None = None
        self._limits = TopicLimits(self._make_admin, settings.max_request_size)
        # topic -> (largest batch, until when): after the broker refused a batch of
        # several records for its size.
        self._split: dict[str, tuple[int, float]] = {}
        self._said: dict[str, float] = {}  # topic -> when its refusal may be logged again

    def _make(self) -> AIOKafkaProducer:
        s = self._settings
        transactional: dict[str, Any] = {}
        if self.transactional_id is not None:
            transactional = {
                "transactional_id": self.transactional_id,
                "transaction_timeout_ms": s.transaction_timeout_ms,
            }
            quick_transaction_retries()
        return AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=s.client_id,
            acks="all",
            enable_idempotence=True,
            max_request_size=s.max_request_size,
            linger_ms=s.linger_ms,
            request_timeout_ms=s.request_timeout_ms,
            compression_type=None if s.compression_type == "none" else s.compression_type,
            **transactional,
            **self._security.client_options(),
        )

    @property
    def producer(self) -> AIOKafkaProducer:
        """The started producer (its transactions are run by relay.transport.transactions)."""
        if self._producer is None:
            raise PublishFailed(FailureReason.PRODUCER_BROKEN, "producer is not started")
        return self._producer

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
            if self.transactional_id is None:
                await producer.start()
            else:
                # aiokafka retries InitProducerId for as long as the broker's transaction
                # coordinator is not available (a transaction state log that cannot be
                # created): bounded here, so the refusal is reported.
                limit_s = self._settings.request_timeout_ms / 1000
                try:
                    await asyncio.wait_for(producer.start(), limit_s)
                except TimeoutError as exc:
                    raise PublishFailed(
                        FailureReason.TIMEOUT,
                        f"the broker did not initialise transactional id "
                        f"{self.transactional_id} within {limit_s:.0f}s (InitProducerId: "
                        "is its transaction coordinator available, "
                        "transaction.state.log.replication.factor at most the brokers?)",
                    ) from exc
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise classify(exc) from exc
        self._producer = producer
        self._topics = TopicDirectory(
            producer,
            name="kafka topic lookup",
            timeout_s=self._settings.request_timeout_ms / 1000,
        )

    async def look_up(self, topic: str) -> None:
        """Have the topic's partitions known before its first record, waiting up to the
        request timeout (a transactional producer's progress topic, after each start: a
        transaction whose progress record found it unknown would be aborted)."""
        directory = self._topics
        if directory is not None and not isinstance(directory.partitions(topic), list):
            await directory.looked(self._settings.request_timeout_ms / 1000)

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        topics, self._topics = self._topics, None
        if topics is not None:
            await topics.close()
        if producer is not None:
            await stop_unsent_dropped(producer)
            read_left_failures(producer)  # the transaction's too
        await self._limits.close()

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    def _partitions(self, topics: set[str]) -> dict[str, list[int] | PublishFailed | None]:
        """Each topic's partitions, a topic's failure, or None: not known yet (HELD)."""
        directory = self._topics
        assert directory is not None
        found: dict[str, list[int] | PublishFailed | None] = {}
        for topic in topics:
            known = directory.partitions(topic)
            if isinstance(known, list):
                found[topic] = known
            elif known is TopicState.LOOKING:
                found[topic] = None
            else:
                reason, text = _WHY[known]
                found[topic] = PublishFailed(reason, text.format(topic))
        return found

    def _sizes(self, topic: str) -> tuple[int, int | None]:
        """(the record batch to build, the largest record the broker takes or None: not
        known) for the topic."""
        limit = self._limits.limit(topic)
        size = FALLBACK_BATCH_BYTES if limit is None else limit
        size = min(size, self._settings.max_request_size)
        if self._settings.max_batch_bytes is not None:
            size = min(size, self._settings.max_batch_bytes)
        split = self._split.get(topic)
        if split is not None:
            if split[1] > time.monotonic():
                size = min(size, split[0])
            else:
                del self._split[topic]
        return size, None if limit is None else limit - BATCH_HEADER - RECORD_OVERHEAD

    def _builder(self, producer: AIOKafkaProducer, size: int) -> BatchBuilder:
        # The producer's own builders have one size for every topic; ours fit each topic.
        return record_batch(producer, size)

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        """One record batch per partition (more when a partition's records exceed the
        topic's limit); every batch is submitted before any ack is awaited."""
        return await self.publish_then(records, None)

    async def publish_then(
        self, records: Sequence[OutgoingRecord], trailer: Trailer | None
    ) -> list[Outcome]:
        """publish, and then the trailer's records: trailer is called once the batches are
        submitted, with the indexes of the records submitted (not refused or held before
        sending), and the records it returns (one topic) go in the same round, their
        outcomes after the others' (kafka_transactions: the progress records, which list
        exactly the rows submitted)."""
        producer = self._producer
        if producer is None:
            raise PublishFailed(FailureReason.PRODUCER_BROKEN, "producer is not started")
        results: list[Outcome] = [HELD] * len(records)
        # Every healthy batch is acked or expired by aiokafka within about two request
        # timeouts; a batch appended while its producer was being stopped (recreated)
        # is never sent nor failed, and its shard would wait for it forever.
        acks = _Acks(3 * self._settings.request_timeout_ms / 1000)
        await self._enqueue(producer, records, 0, results, acks)
        if trailer is not None:
            extras = trailer(sorted(i for members in acks.members for i in members))
            if extras:
                results += [HELD] * len(extras)
                await self._enqueue(producer, extras, len(records), results, acks)
        for members, failed in await acks.wait():
            outcome: Outcome = ACKED if failed is None else failed
            for i in members:
                results[i] = outcome
        return results

    async def _enqueue(
        self,
        producer: AIOKafkaProducer,
        records: Sequence[OutgoingRecord],
        first: int,
        results: list[Outcome],
        acks: _Acks,
    ) -> None:
        """Enqueue the records, one record batch per partition, their outcomes from index
        `first` of results: a topic's failure on its first record of each key (the later
        ones HELD behind it), HELD while the topic is being looked up."""
        topics = {r.topic for r in records}
        partitions = self._partitions(topics)
        if None in partitions.values() and self._topics is not None:
            # A topic seen for the first time: its lookup (one round trip) usually ends at
            # once; it is given LOOKUP_WAIT_S, and its records wait if it takes longer.
            await self._topics.looked(LOOKUP_WAIT_S)
            partitions = self._partitions(topics)
        groups: dict[tuple[str, int], list[tuple[int, OutgoingRecord]]] = {}
        refused: set[tuple[str, bytes]] = set()
        for i, record in enumerate(records, first):
            known = partitions[record.topic]
            if known is None:
                continue  # HELD: the topic is being looked up, beside the cycle
            if isinstance(known, PublishFailed):
                # Its first record carries the topic's failure; the later ones are HELD
                # behind it, as behind any refused record of their key.
                if (record.topic, record.key) not in refused:
                    refused.add((record.topic, record.key))
                    results[i] = known
                continue
            partition = known[_key_slot(record.key) % len(known)]
            group = groups.get((record.topic, partition))
            if group is None:
                groups[record.topic, partition] = [(i, record)]
            else:
                group.append((i, record))
        sizes = {topic: self._sizes(topic) for topic, _ in groups}
        if any(largest is None for _, largest in sizes.values()):
            await self._limits.read(LOOKUP_WAIT_S)  # as for a topic's lookup
            sizes = {topic: self._sizes(topic) for topic, _ in groups}
        for (topic, partition), items in groups.items():
            size, largest = sizes[topic]
            await self._enqueue_partition(
                producer, topic, partition, size, items, results, acks, largest
            )

    async def _enqueue_partition(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        partition: int,
        size: int,
        items: list[tuple[int, OutgoingRecord]],
        results: list[Outcome],
        acks: _Acks,
        largest: int | None = None,
    ) -> None:
        """largest: the largest record the topic takes (None: not known; then none is
        refused here). A record larger than `size` goes in a batch of its own."""
        builder, members, start = self._builder(producer, size), list[int](), 0
        # Keys whose later records wait for the next call: in a batch already submitted
        # by this call, or refused as too large.
        held: set[bytes] = set()
        for n, (i, record) in enumerate(items):
            if n and not n % PIECE:
                await asyncio.sleep(0)  # outbox_core.supervisor.pieces: the other lane's turn
            if held and record.key in held:
                continue  # HELD: its key's earlier records are in a batch of their own
            # A builder takes any first record, however large; only a first record needs
            # its size checked (a later one that does not fit starts the next batch).
            if members and _append(builder, record) is None:  # full: submit it
                failed = await self._submit(
                    producer, builder, topic, partition, members, results, acks, items[start:n]
                )
                if failed is not None:
                    return  # nothing later of this partition may overtake it: HELD
                # The submitted batch's keys (items since it began; those skipped there
                # were held already).
                held.update(earlier.key for _, earlier in items[start:n])
                builder, members, start = self._builder(producer, size), [], n
                if record.key in held:
                    continue  # HELD
            if not members:
                if largest is not None and record.size > largest:
                    # Its later records are HELD, not refused: they are not too large, and
                    # whether they may go ahead of it is the failure policy's to decide.
                    held.add(record.key)
                    results[i] = PublishFailed(
                        FailureReason.TOO_LARGE,
                        f"record too large: {record.size} bytes, more than topic {topic} "
                        f"accepts (max.message.bytes {largest + BATCH_HEADER + RECORD_OVERHEAD})",
                    )
                    continue
                _append(builder, record)
            members.append(i)
        if members:
            await self._submit(
                producer, builder, topic, partition, members, results, acks, items[start:]
            )

    async def _submit(
        self,
        producer: AIOKafkaProducer,
        builder: BatchBuilder,
        topic: str,
        partition: int,
        members: list[int],
        results: list[Outcome],
        acks: _Acks,
        built_from: Sequence[tuple[int, OutgoingRecord]] = (),
    ) -> PublishFailed | None:
        """built_from: the items the batch was built from (members among them)."""
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
        records = len(members)
        acks.add(
            fut,
            members,
            lambda exc: self._refused(exc, topic, records, _batch_bytes(built_from, members)),
        )
        return None

    def _say_refused(self, topic: str, failed: PublishFailed) -> None:
        """A log line naming the topic whose writes the cluster refuses, once a minute."""
        now = time.monotonic()
        if self._said.get(topic, 0.0) > now:
            return
        if len(self._said) > 10_000:
            self._said.clear()
        self._said[topic] = now + 60.0
        log.warning(
            "topic refuses the relay's writes; its events back off (never parked for it)",
            extra={"topic": topic, "reason": failed.reason.label, "error": str(failed)},
        )

    def _refused(
        self, exc: BaseException, topic: str, records: int, batch_bytes: int
    ) -> PublishFailed:
        """A batch's refusal as the relay's error, and what it teaches about the topic."""
        failed = classify(exc)
        if failed.reason is FailureReason.UNKNOWN_TOPIC and self._topics is not None:
            self._topics.forget(topic)  # deleted meanwhile? look it up again
        if not failed.charged and not failed.fatal:
            self._say_refused(topic, failed)
        if failed.reason is not FailureReason.TOO_LARGE:
            return failed
        self._limits.forget(topic)  # the topic's limit changed: read it again
        if records == 1:
            return failed  # too large alone: the record's own fault
        # None of them is known to be too large: smaller batches next time, uncharged.
        cap = max(1, batch_bytes // 2)
        known = self._split.get(topic)
        if known is not None and known[1] > time.monotonic():
            cap = min(cap, known[0])
        self._split[topic] = (cap, time.monotonic() + SPLIT_FOR_S)
        return PublishFailed(
            FailureReason.BATCH_TOO_LARGE,
            f"{failed}: a batch of {records} records ({batch_bytes} bytes); topic {topic}'s "
            f"batches are now at most {cap} bytes",
        )


def _batch_bytes(items: Sequence[tuple[int, OutgoingRecord]], members: list[int]) -> int:
    """A batch's bytes, as the broker's size refusal is judged by: counted only for a
    refused batch, not record by record for every batch sent."""
    chosen = set(members)
    return sum(record.size + RECORD_OVERHEAD for i, record in items if i in chosen)


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


class _Acks:
    """The acks of one publish call's record batches, joined: each batch's outcome is
    aiokafka's with its error translated, and a batch still unanswered after limit_s
    fails with NO_ACK. One future and one timer a call and a callback a batch, not a
    future, a timer and a gather entry per batch: at a steady trickle those cost a cycle
    (a batch per partition) more event-loop work than its produce request."""

    def __init__(self, limit_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._limit_s = limit_s
        # Made by wait(), once every batch is added: a batch acked while later ones are
        # still being submitted must not end the call.
        self._all: asyncio.Future[None] | None = None
        self._expired = False
        self._left = 0
        self.members: list[list[int]] = []  # the record indexes of each batch
        self._answers: list[PublishFailed | None] = []  # _UNANSWERED until answered

    def add(
        self,
        fut: asyncio.Future[Any],
        members: list[int],
        refused: Callable[[BaseException], PublishFailed],
    ) -> None:
        """One submitted batch: fut is aiokafka's; refused translates its error."""
        n = len(self.members)
        self.members.append(members)
        self._answers.append(_UNANSWERED)
        self._left += 1
        fut.add_done_callback(functools.partial(self._answered, n, refused))

    def _answered(
        self, n: int, refused: Callable[[BaseException], PublishFailed], done: asyncio.Future[Any]
    ) -> None:
        if self._expired:
            if not done.cancelled():
                done.exception()  # read, so it is not logged as never retrieved
            return  # the outcome stands
        if done.cancelled():
            self._answers[n] = PublishFailed(FailureReason.PRODUCER_BROKEN, "send cancelled")
        else:
            exc = done.exception()
            self._answers[n] = None if exc is None else refused(exc)
        self._left -= 1
        if not self._left and self._all is not None and not self._all.done():
            self._all.set_result(None)

    def _expire(self) -> None:
        self._expired = True  # the batches not answered fail with NO_ACK
        if self._all is not None and not self._all.done():
            self._all.set_result(None)

    async def wait(self) -> list[tuple[list[int], PublishFailed | None]]:
        """Each batch's members and its failure (None: acked), once every batch is
        answered or limit_s has passed; called once every batch is added."""
        if self._left and not self._expired:
            self._all = self._loop.create_future()
            timer = self._loop.call_later(self._limit_s, self._expire)
            try:
                await self._all
            finally:
                timer.cancel()
        if self._left:
            no_ack = PublishFailed(
                FailureReason.NO_ACK, f"no ack from Kafka within {self._limit_s:.0f}s"
            )
            self._answers = [no_ack if a is _UNANSWERED else a for a in self._answers]
        return list(zip(self.members, self._answers, strict=True))


# A batch's answer until aiokafka gives one: never handed out (wait() replaces it).
_UNANSWERED = PublishFailed(FailureReason.NO_ACK, "not answered yet")
