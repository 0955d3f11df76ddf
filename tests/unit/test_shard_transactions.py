"""ShardTransactions' decisions without a broker: what a progress record lists, and what
becomes of a shard whose transaction fails, is fenced or cannot end. The producer and the
progress topic are doubles; the real broker runs the same paths in
tests/integration/test_relay_transactions.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
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


class Producer:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.commit_error: BaseException | None = None

    async def begin_transaction(self) -> None:
        self.calls.append("begin")

    async def commit_transaction(self) -> None:
        self.calls.append("commit")
        if self.commit_error is not None:
            raise self.commit_error

    async def abort_transaction(self) -> None:
        self.calls.append("abort")


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

    async def stop(self) -> None:
        if self.stop_hangs:
            await asyncio.sleep(3600)

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    async def publish_then(
        self, records: Sequence[OutgoingRecord], trailer: Trailer | None
    ) -> list[Outcome]:
        """Every record is submitted; those of a refused key fail at their ack."""
        self.sent += records
        outcomes: list[Outcome] = [
            PublishFailed(FailureReason.UNKNOWN_TOPIC, "missing") if r.key in self.refuse else ACKED
            for r in records
        ]
        extra = trailer(list(range(len(records)))) if trailer is not None else None
        if extra is not None:
            self.sent.append(extra)
            outcomes.append(ACKED)
        return outcomes


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
        return {s: last[s] for s in shards if s in last}

    monkeypatch.setattr(ProgressTopic, "start", nothing)
    monkeypatch.setattr(ProgressTopic, "last", read)
    monkeypatch.setattr(transactions, "KafkaPublisher", Publisher)
    Publisher.made = []
    return last


def shard_transactions(events: Events) -> ShardTransactions:
    kafka = load_settings(
        database_url="sqlite:///relay.db",
        kafka_bootstrap_servers="localhost:9092",
        kafka_security_protocol="PLAINTEXT",
        kafka_transactions=True,
        kafka_progress_topic=PROGRESS,
        kafka_transaction_timeout_ms=1000,
    ).kafka
    return ShardTransactions(kafka, KafkaSecurity.plaintext(), events)


def row(id_: int, shard: int, key: str = "k") -> ClaimedRow:
    return ClaimedRow(id_, shard, f"e{id_}", TOPIC, key, "T", b"{}", "{}", 0, 0.0, None)


def record(r: ClaimedRow) -> OutgoingRecord:
    return OutgoingRecord(TOPIC, r.key.encode(), b"{}", [])


def progress_ids(publisher: Publisher) -> list[list[int]]:
    return [json.loads(r.value)["ids"] for r in publisher.sent if r.topic == PROGRESS]


async def one_shard(
    events: Events, commit_error: BaseException
) -> tuple[ShardTransactions, Publisher]:
    """Shard 0 under token 1, its producer's commits failing with commit_error."""
    shards = shard_transactions(events)
    await shards.ready({0: 1})
    (publisher,) = Publisher.made
    publisher.producer.commit_error = commit_error
    return shards, publisher


async def send(
    shards: ShardTransactions, rows: list[ClaimedRow], tokens: dict[int, int]
) -> list[Outcome]:
    return await shards.publish_shards(rows, [record(r) for r in rows], tokens)


async def test_a_progress_record_lists_the_rows_not_confirmed_settled(
    progress_topic: dict[int, Progress],
) -> None:
    shards = shard_transactions(Events())
    assert await shards.ready({0: 1}) == {}
    (producer,) = Publisher.made
    assert await send(shards, [row(1, 0), row(2, 0)], {0: 1}) == [ACKED, ACKED]
    assert await send(shards, [row(3, 0)], {0: 1}) == [ACKED]  # 1 and 2: settle in flight
    shards.confirm(0, [1, 2])
    assert await send(shards, [row(4, 0)], {0: 1}) == [ACKED]
    assert progress_ids(producer) == [[1, 2], [1, 2, 3], [3, 4]]
    assert producer.producer.calls == ["begin", "commit"] * 3


async def test_a_new_owner_settles_what_the_last_progress_record_lists_first(
    progress_topic: dict[int, Progress],
) -> None:
    progress_topic[5] = Progress(5, 3, (10, 11))
    events = Events()
    shards = shard_transactions(events)
    assert await shards.ready({5: 4, 6: 4}) == {5: [10, 11]}
    assert [p.transactional_id for p in Publisher.made] == [
        "outbox-relay-shard-5",
        "outbox-relay-shard-6",
    ]
    shards.confirm(5, [10, 11], recovered=True)
    assert await shards.ready({5: 4, 6: 4}) == {}
    assert events.recovered_rows == 2


async def test_a_refused_record_aborts_its_shards_transaction_only(
    progress_topic: dict[int, Progress],
) -> None:
    events = Events()
    shards = shard_transactions(events)
    await shards.ready({0: 1, 1: 1})
    first, second = Publisher.made
    first.refuse = {b"bad"}
    outcomes = await send(shards, [row(1, 0), row(2, 0, "bad"), row(3, 1)], {0: 1, 1: 1})
    assert outcomes[0] is HELD  # not charged: it goes in the next transaction
    assert isinstance(outcomes[1], PublishFailed)
    assert outcomes[1].reason is FailureReason.UNKNOWN_TOPIC
    assert outcomes[2] is ACKED  # another shard, another transaction
    assert first.producer.calls == ["begin", "abort"]  # its progress record with it
    assert second.producer.calls == ["begin", "commit"]
    assert sorted(events.ended) == [False, True]


async def test_a_commit_without_an_answer_holds_its_rows_until_the_progress_topic_tells(
    progress_topic: dict[int, Progress],
) -> None:
    shards, publisher = await one_shard(Events(), kafka_errors.KafkaTimeoutError())
    assert await send(shards, [row(1, 0), row(2, 0)], {0: 1}) == [HELD, HELD]
    # It did commit: the progress topic says so, and the restarted producer reads it.
    progress_topic[0] = Progress(0, 1, (1, 2))
    assert await shards.ready({0: 1}) == {0: [1, 2]}
    assert publisher.starts == 2


async def test_a_fenced_shard_is_let_go_and_its_rows_not_charged(
    progress_topic: dict[int, Progress],
) -> None:
    events = Events()
    shards, _ = await one_shard(events, kafka_errors.ProducerFenced())
    outcomes = await send(shards, [row(1, 0)], {0: 1})
    assert isinstance(outcomes[0], PublishFailed)
    assert outcomes[0].reason is FailureReason.FENCED
    assert not outcomes[0].charged
    assert events.fenced_count == 1
    # The shard's producer is gone: a later lease of it starts a new one.
    await shards.ready({0: 2})
    assert len(Publisher.made) == 2


async def test_a_transaction_that_cannot_end_marks_its_shard_stuck(
    progress_topic: dict[int, Progress],
) -> None:
    shards, publisher = await one_shard(Events(), kafka_errors.KafkaTimeoutError())
    publisher.stop_hangs = True
    assert await send(shards, [row(1, 0)], {0: 1}) == [HELD]
    assert shards.stuck == {0}
    shards.forget(0)  # the lease went: the next owner's init ends it
    assert shards.stuck == set()


def test_a_fenced_error_is_its_own_reason() -> None:
    failed = classify(kafka_errors.ProducerFenced())
    assert failed.reason is FailureReason.FENCED
    assert failed.retriable
