"""ShardTransactions' decisions without a broker: what the progress records list, whom a
new owner fences, and what becomes of a transaction that fails, is fenced or cannot end.
The producer and the progress topic are doubles; the real broker runs the same paths in
tests/integration/test_relay_transactions.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest
from aiokafka import TopicPartition
from aiokafka import errors as kafka_errors

from outbox_core.kafka_security import KafkaSecurity
from relay.config import load_settings
from relay.store import ClaimedRow
from relay.transport import transactions
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import Trailer, classify
from relay.transport.progress import Progress, ProgressTopic
from relay.transport.protocol import ACKED, HELD, Outcome
from relay.transport.records import OutgoingRecord
from relay.transport.transactions import ShardTransactions

TOPIC = "orders"
PROGRESS = "progress"
ME = "r1"
ID = f"outbox-relay-replica-{ME}"

# What happened, in order: a producer's start or stop, a progress read, a lease check.
happened: list[str] = []


class TxnManager:
    """aiokafka's transaction manager, as far as the adapter reads it."""

    def __init__(self) -> None:
        self._txn_partitions: set[TopicPartition] = set()
        self.pending: set[TopicPartition] = set()
        self.open = False
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def partitions_to_add(self) -> set[TopicPartition]:
        return self.pending

    def is_in_transaction(self) -> bool:
        return self.open and not self.ended.done()

    def is_fatal_error(self) -> bool:
        return self.ended.done()

    def wait_for_transaction_end(self) -> asyncio.Future[None]:
        return self.ended

    def fenced(self) -> None:
        """What aiokafka's sender does when the coordinator answers with a newer epoch:
        it stops, and the transaction manager goes to its fatal state."""
        self.ended.set_exception(kafka_errors.ProducerFenced())

    def maybe_add_partition_to_txn(self, tp: TopicPartition) -> None:
        self.pending.add(tp)


class Producer:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.commit_error: BaseException | None = None
        self._txn_manager = TxnManager()

    async def begin_transaction(self) -> None:
        self.calls.append("begin")
        self._txn_manager.open = True

    async def commit_transaction(self) -> None:
        self.calls.append("commit")
        self._end()
        if self.commit_error is not None:
            raise self.commit_error

    async def abort_transaction(self) -> None:
        self.calls.append("abort")
        assert not self._txn_manager.is_fatal_error(), "aiokafka: invalid state transition"
        self._end()

    def _end(self) -> None:
        self._txn_manager.open = False
        self._txn_manager._txn_partitions.clear()
        self._txn_manager.pending.clear()


class Publisher:
    """Stands in for KafkaPublisher: records what each shard's producer sent."""

    made: ClassVar[list[Publisher]] = []

    def __init__(self, *_: Any, transactional_id: str | None = None) -> None:
        self.transactional_id = transactional_id
        self.producer = Producer()
        self.sent: list[OutgoingRecord] = []
        self.starts = 0
        self.stop_hangs = False
        self.refuse: set[bytes] = set()  # keys whose records fail
        Publisher.made.append(self)

    async def start(self) -> None:
        self.starts += 1
        happened.append(f"start {self.transactional_id}")
        if self.producer._txn_manager.is_fatal_error():  # a new producer, a new epoch
            self.producer._txn_manager = TxnManager()

    async def look_up(self, topic: str) -> None:
        happened.append(f"look up {topic}")

    async def stop(self) -> None:
        happened.append(f"stop {self.transactional_id}")
        if self.stop_hangs:
            await asyncio.sleep(3600)

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    async def publish_then(
        self, records: Sequence[OutgoingRecord], trailer: Trailer | None
    ) -> list[Outcome]:
        """Every record is submitted; those of a refused key fail at their ack; all are
        refused when the transaction is not open (aiokafka's IllegalOperation)."""
        if not self.producer._txn_manager.is_in_transaction():
            refused = classify(kafka_errors.IllegalOperation("not in transaction"))
            return [refused] * (len(records) + 1)
        self.sent += records
        self.producer._txn_manager.pending.update(TopicPartition(r.topic, 0) for r in records)
        outcomes: list[Outcome] = [
            PublishFailed(FailureReason.UNKNOWN_TOPIC, "missing") if r.key in self.refuse else ACKED
            for r in records
        ]
        extras = trailer(list(range(len(records)))) if trailer is not None else []
        self.sent += extras
        self.producer._txn_manager.pending.update(TopicPartition(r.topic, 0) for r in extras)
        return outcomes + [ACKED] * len(extras)


class Events:
    def __init__(self) -> None:
        self.ended: list[bool] = []
        self.fenced_count = 0
        self.recovered_rows = 0

    def transaction_ended(self, committed: bool) -> None:
        self.ended.append(committed)

    def fenced(self) -> None:
        self.fenced_count += 1

    def recovered(self, rows: int) -> None:
        self.recovered_rows += rows


@pytest.fixture
def progress_topic(monkeypatch: pytest.MonkeyPatch) -> dict[int, Progress]:
    """The progress topic's last record per shard, as the double reads it."""
    last: dict[int, Progress] = {}

    async def nothing(self: ProgressTopic) -> None:
        return None

    async def read(self: ProgressTopic, shards: Any) -> dict[int, Progress]:
        shards = sorted(shards)
        happened.append(f"read {shards}")
        return {s: last[s] for s in shards if s in last}

    monkeypatch.setattr(ProgressTopic, "start", nothing)
    monkeypatch.setattr(ProgressTopic, "last", read)
    monkeypatch.setattr(transactions, "KafkaPublisher", Publisher)
    Publisher.made = []
    happened.clear()
    return last


class Leases:
    """The database's answer to "which of these leases are still ours"."""

    def __init__(self) -> None:
        self.lost: set[int] = set()
        self.asked = 0

    async def __call__(self, tokens: Mapping[int, int]) -> set[int]:
        self.asked += 1
        happened.append(f"check {sorted(tokens)}")
        return set(tokens) - self.lost


def shard_transactions(events: Events) -> ShardTransactions:
    kafka = load_settings(
        database_url="sqlite:///relay.db",
        kafka_bootstrap_servers="localhost:9092",
        kafka_security_protocol="PLAINTEXT",
        kafka_transactions=True,
        kafka_progress_topic=PROGRESS,
        kafka_transaction_timeout_ms=1000,
    ).kafka
    return ShardTransactions(kafka, KafkaSecurity.plaintext(), ME, events)


def row(id_: int, shard: int, key: str = "k") -> ClaimedRow:
    return ClaimedRow(id_, shard, f"e{id_}", TOPIC, key, "T", b"{}", "{}", 0, 0.0, None)


def record(r: ClaimedRow) -> OutgoingRecord:
    return OutgoingRecord(TOPIC, r.key.encode(), b"{}", [])


def progress_ids(publisher: Publisher) -> list[dict[int, list[int]]]:
    """Each transaction's progress records: shard -> ids."""
    found: list[dict[int, list[int]]] = []
    fresh = True
    for r in publisher.sent:
        if r.topic != PROGRESS:
            fresh = True
            continue
        if fresh:
            found.append({})
            fresh = False
        body = json.loads(r.value)
        found[-1][body["shard"]] = body["ids"]
    return found


async def started(
    events: Events, tokens: dict[int, int], leases: Leases
) -> tuple[ShardTransactions, Publisher]:
    """Started as the relay starts it, then ready for these leases."""
    shards = shard_transactions(events)
    await shards.start()
    await shards.ready(tokens, leases)
    (publisher,) = Publisher.made
    return shards, publisher


async def send(
    shards: ShardTransactions, rows: list[ClaimedRow], tokens: dict[int, int]
) -> list[Outcome]:
    return await shards.publish_shards(rows, [record(r) for r in rows], tokens)


async def test_one_transaction_carries_every_shards_rows_and_a_progress_record_each(
    progress_topic: dict[int, Progress],
) -> None:
    shards, producer = await started(Events(), {0: 1, 1: 1}, Leases())
    assert producer.transactional_id == ID
    assert await send(shards, [row(1, 0), row(2, 0), row(5, 1)], {0: 1, 1: 1}) == [ACKED] * 3
    assert await send(shards, [row(3, 0)], {0: 1, 1: 1}) == [ACKED]  # 1, 2, 5: settle in flight
    shards.confirm(0, [1, 2])
    assert await send(shards, [row(4, 0), row(6, 1)], {0: 1, 1: 1}) == [ACKED, ACKED]
    assert progress_ids(producer) == [
        {0: [1, 2], 1: [5]},
        {0: [1, 2, 3]},
        {0: [3, 4], 1: [5, 6]},
    ]
    assert producer.producer.calls == ["begin", "commit"] * 3


async def test_the_next_transaction_begins_before_the_claim_and_none_stays_open_idle(
    progress_topic: dict[int, Progress],
) -> None:
    leases = Leases()
    shards, publisher = await started(Events(), {0: 1}, leases)
    producer = publisher.producer
    assert await send(shards, [row(1, 0)], {0: 1}) == [ACKED]
    await shards.ready({0: 1}, leases)  # a cycle's start: begun, its partitions asked for
    assert producer.calls == ["begin", "commit", "begin"]
    assert producer._txn_manager.pending == {TopicPartition(TOPIC, 0), TopicPartition(PROGRESS, 0)}
    assert await send(shards, [row(2, 0)], {0: 1}) == [ACKED]  # in the one begun ahead
    assert producer.calls == ["begin", "commit", "begin", "commit"]
    await shards.ready({0: 1}, leases)  # begun ahead again; its claim finds nothing
    await shards.ready({0: 1}, leases)  # so it is aborted, and nothing begun
    await shards.ready({0: 1}, leases)
    assert producer.calls == ["begin", "commit", "begin", "commit", "begin", "abort"]
    assert not producer._txn_manager.open


async def test_a_new_owner_fences_the_previous_one_before_it_reads_what_kafka_has(
    progress_topic: dict[int, Progress],
) -> None:
    progress_topic[5] = Progress(5, 3, (10, 11))
    events = Events()
    shards = shard_transactions(events)
    await shards.start()
    shards.taken(5, 4, "r0")
    shards.taken(6, 1, None)  # a lease never held before: no one to fence
    leases = Leases()
    assert await shards.ready({5: 4, 6: 1}, leases) == {5: [10, 11]}
    assert happened == [
        f"start {ID}",
        f"look up {PROGRESS}",
        "start outbox-relay-replica-r0",
        "stop outbox-relay-replica-r0",
        "check [5, 6]",
        "read [5, 6]",
    ]
    shards.confirm(5, [10, 11], recovered=True)
    assert await shards.ready({5: 4, 6: 1}, leases) == {}
    assert events.recovered_rows == 2
    assert len(Publisher.made) == 2  # the fence is made once
    assert leases.asked == 1  # and the leases checked once an init


async def test_a_lease_taken_back_under_this_replicas_name_initialises_its_own_producer_again(
    progress_topic: dict[int, Progress],
) -> None:
    shards, producer = await started(Events(), {0: 1}, Leases())
    happened.clear()
    shards.taken(0, 2, ME)
    await shards.ready({0: 2}, Leases())
    assert happened == [f"stop {ID}", f"start {ID}", f"look up {PROGRESS}", "check [0]", "read [0]"]
    assert Publisher.made == [producer]


async def test_a_refused_record_aborts_the_transaction_and_charges_it_alone(
    progress_topic: dict[int, Progress],
) -> None:
    events = Events()
    shards, producer = await started(events, {0: 1, 1: 1}, Leases())
    producer.refuse = {b"bad"}
    outcomes = await send(shards, [row(1, 0), row(2, 0, "bad"), row(3, 1)], {0: 1, 1: 1})
    assert outcomes[0] is HELD  # not charged: it goes in the next transaction
    assert isinstance(outcomes[1], PublishFailed)
    assert outcomes[1].reason is FailureReason.UNKNOWN_TOPIC
    assert outcomes[2] is HELD  # another shard's, in the same transaction
    assert producer.producer.calls == ["begin", "abort"]
    assert events.ended == [False]
    assert await send(shards, [row(1, 0), row(3, 1)], {0: 1, 1: 1}) == [ACKED, ACKED]


async def test_a_commit_without_an_answer_holds_its_rows_until_the_progress_topic_tells(
    progress_topic: dict[int, Progress],
) -> None:
    leases = Leases()
    shards, publisher = await started(Events(), {0: 1}, leases)
    publisher.producer.commit_error = kafka_errors.KafkaTimeoutError()
    assert await send(shards, [row(1, 0), row(2, 0)], {0: 1}) == [HELD, HELD]
    # It did commit: the progress topic says so, and the restarted producer reads it.
    progress_topic[0] = Progress(0, 1, (1, 2))
    assert await send(shards, [row(3, 0)], {0: 1}) == [HELD]  # not before ready()
    assert await shards.ready({0: 1}, leases) == {0: [1, 2]}
    assert publisher.starts == 2
    assert leases.asked == 2


async def test_a_fenced_producer_holds_its_rows_and_lets_go_only_the_shards_taken_from_it(
    progress_topic: dict[int, Progress],
) -> None:
    events = Events()
    leases = Leases()
    shards, publisher = await started(events, {0: 1, 1: 1}, leases)
    publisher.producer.commit_error = kafka_errors.ProducerFenced()
    assert await send(shards, [row(1, 0), row(2, 1)], {0: 1, 1: 1}) == [HELD, HELD]
    assert events.fenced_count == 1
    # Another replica took shard 1 (and fenced this one to do it).
    publisher.producer.commit_error = None
    leases.lost = {1}
    assert await shards.ready({0: 1, 1: 1}, leases) == {}
    outcomes = await send(shards, [row(1, 0), row(2, 1)], {0: 1, 1: 1})
    assert outcomes[0] is ACKED
    assert isinstance(outcomes[1], PublishFailed)
    assert outcomes[1].reason is FailureReason.FENCED
    assert not outcomes[1].charged
    assert progress_ids(publisher)[-1] == {0: [1]}


async def test_a_fence_met_by_the_transaction_begun_ahead_holds_its_rows_and_parks_none(
    progress_topic: dict[int, Progress],
) -> None:
    """The coordinator fences the producer while the transaction begun before the claim
    is open (a zombie resumed, or a transaction timed out): aiokafka's sender stops, its
    sends are refused and its abort fails. The cycle's rows are held, none charged, and
    the next ready() starts a new producer, checks the leases and reads the progress."""
    events = Events()
    leases = Leases()
    shards, publisher = await started(events, {0: 1}, leases)
    assert await send(shards, [row(1, 0)], {0: 1}) == [ACKED]
    await shards.ready({0: 1}, leases)  # begun ahead
    publisher.producer._txn_manager.fenced()
    assert await send(shards, [row(2, 0), row(3, 0)], {0: 1}) == [HELD, HELD]
    assert events.fenced_count == 1
    assert "abort" not in publisher.producer.calls
    happened.clear()
    await shards.ready({0: 1}, leases)
    assert happened == [f"start {ID}", f"look up {PROGRESS}", "check [0]", "read [0]"]
    assert await send(shards, [row(2, 0), row(3, 0)], {0: 1}) == [ACKED, ACKED]


async def test_a_fence_met_by_an_idle_transaction_begun_ahead_starts_the_producer_again(
    progress_topic: dict[int, Progress],
) -> None:
    events = Events()
    leases = Leases()
    shards, publisher = await started(events, {0: 1}, leases)
    assert await send(shards, [row(1, 0)], {0: 1}) == [ACKED]
    await shards.ready({0: 1}, leases)  # begun ahead; its claim finds nothing
    publisher.producer._txn_manager.fenced()
    await shards.ready({0: 1}, leases)  # not aborted (it cannot be): stopped instead
    assert "abort" not in publisher.producer.calls
    assert events.fenced_count == 1
    happened.clear()
    await shards.ready({0: 1}, leases)
    assert happened == [f"start {ID}", f"look up {PROGRESS}", "check [0]", "read [0]"]


async def test_a_transaction_that_cannot_end_marks_its_shards_stuck(
    progress_topic: dict[int, Progress],
) -> None:
    shards, publisher = await started(Events(), {0: 1, 1: 1}, Leases())
    publisher.producer.commit_error = kafka_errors.KafkaTimeoutError()
    publisher.stop_hangs = True
    assert await send(shards, [row(1, 0), row(2, 1)], {0: 1, 1: 1}) == [HELD, HELD]
    assert shards.stuck == {0, 1}
    shards.forget(0)  # the lease went: the next owner's fence ends it
    assert shards.stuck == {1}


def test_a_fenced_error_is_its_own_reason() -> None:
    failed = classify(kafka_errors.ProducerFenced())
    assert failed.reason is FailureReason.FENCED
    assert failed.retriable
