"""kafka_transactions on the real broker and databases: a cycle's records go in one Kafka
transaction with a progress record per shard; a failing record aborts it, charged alone;
a second producer under the replica's transactional id fences the relay's, which starts
again and keeps the shards the database still shows its own; a shard's next owner
settles from the progress topic what Kafka already has. Every topic
is read back read_committed (tests.support.kafka.read_topic), as the docs tell consumers
to read it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any, cast

import pytest
from aiokafka import AIOKafkaProducer

from outbox_core.kafka_security import KafkaSecurity
from producer_lib import Event, Outbox
from relay.config import RelaySettings
from relay.database import make_store
from relay.errors import StoreUnavailable
from relay.pipeline.step import Step
from relay.service import RelayService
from relay.store import ClaimedRow, Settled, SettleRequest, Store
from relay.transport import kafka as kafka_transport
from relay.transport.aiokafka_adapter import transaction_failure
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import KafkaPublisher
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.memory import MemoryPublisher
from relay.transport.progress import Progress, ProgressTopic, ProgressTopicRefused
from relay.transport.protocol import ACKED, HELD
from relay.transport.records import OutgoingRecord
from relay.transport.transactions import ShardTransactions
from tests.conftest import TopicFactory
from tests.integration.test_relay_delivery import emit_orders
from tests.support.db import Backend
from tests.support.kafka import read_topic, unique_topic_name
from tests.support.relay import (
    expected_from_db,
    judge_topic,
    relay_settings,
    running_relay,
    wait_drained,
)
from tests.support.stores import emit, event, keys_on_shard
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.dialects("postgres", "sqlite", "mariadb")]


def transactional(backend: Backend, bootstrap: str, **over: Any) -> RelaySettings:
    """A transactional relay with a transactional id prefix and progress topic of its
    own (tests share the broker)."""
    run = uuid.uuid4().hex[:8]
    own = {
        "kafka_transactions": True,
        "kafka_transactional_id_prefix": f"test-{run}",
        "kafka_progress_topic": unique_topic_name("progress"),
        "kafka_transaction_timeout_ms": 2000,
    }
    return relay_settings(backend, bootstrap, **{**own, **over})


def event_ids(records: list[Any]) -> Counter[str]:
    return Counter(dict(r.headers)["event_id"].decode() for r in records)


async def test_a_transactional_relay_delivers_each_event_once(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("orders", partitions=3)
    rolled_back = emit_orders(backend, topic, 600, keys=30)
    expected = expected_from_db(backend)
    settings = transactional(backend, kafka_bootstrap, batch_size=100)
    async with running_relay(settings) as relay:
        await wait_drained(backend)
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    all_ids = [e for ids in expected.values() for e in ids]
    assert verdict.missing(all_ids) == set()
    assert verdict.unexpected(all_ids) == set()
    assert not set(rolled_back) & verdict.delivered
    assert verdict.order_violations == []
    assert verdict.duplicates == 0
    assert relay.stats.transactions_committed > 0
    progress = await read_topic(kafka_bootstrap, settings.kafka.progress_topic)
    assert progress, "every transaction carries a progress record"


@pytest.mark.usefixtures("patient_kafka_lookups")
async def test_a_record_refused_inside_a_transaction_is_charged_alone(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """One key, so one shard and one transaction: the row to a topic the cluster lacks
    aborts it and is charged; the row beside it is not, and goes in the next one."""
    topic = await new_topic("orders")
    missing = unique_topic_name("missing")
    with sync_tx(backend, "driver") as conn:
        ids = Outbox().emit_batch(
            conn, [Event(missing, "k", "Lost", {"n": 1}), Event(topic, "k", "Kept", {"n": 2})]
        )
    good = str(ids[1])
    settings = transactional(
        backend, kafka_bootstrap, failure_policy="skip", max_attempts=100, backoff_base_s=60
    )
    async with running_relay(settings) as relay:
        await until(lambda: relay.stats.published >= 1, 60, "the good row published")
        assert relay.stats.transactions_aborted >= 1
    assert event_ids(await read_topic(kafka_bootstrap, topic)) == Counter({good: 1})
    rows = [r for r in backend.fetch("outbox_rows") if r[2] == missing]
    assert [r[8] for r in rows] == [1], rows  # charged once, alone
    assert "not found" in str(rows[0][11])


class SettleNever:
    """A store whose settles of published rows never reach the database (the relay died
    between Kafka's commit and the settle): they raise as an outage does."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.refused = 0

    async def settle(self, request: SettleRequest) -> Settled:
        if request.published_ids:
            self.refused += 1
            raise StoreUnavailable("settle lost (test)")
        return await self.inner.settle(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_new_owner_settles_what_kafka_has_and_sends_none_of_it_again(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("orders", partitions=2)
    emit_orders(backend, topic, 200, keys=10)
    expected = expected_from_db(backend)
    all_ids = [e for ids in expected.values() for e in ids]
    first = transactional(backend, kafka_bootstrap, batch_size=50)
    never = SettleNever(make_store(first.database))
    dead = RelayService(first, store=cast(Store, never))
    task = asyncio.create_task(dead.run())
    try:
        # Its transactions commit; none of their rows is ever settled.
        await until(lambda: dead.stats.transactions_committed >= 1, 60, "a commit")
        await until(lambda: never.refused >= 1, 60, "a settle refused")
    finally:
        task.cancel()  # stopped while its rows are not settled
        await asyncio.gather(task, return_exceptions=True)
    delivered = event_ids(await read_topic(kafka_bootstrap, topic))
    assert delivered, "the first owner committed transactions to Kafka"
    # The next owner: same prefix and progress topic, leases taken over after the TTL.
    second = relay_settings(
        backend,
        kafka_bootstrap,
        batch_size=50,
        kafka_transactions=True,
        kafka_transactional_id_prefix=first.kafka.transactional_id_prefix,
        kafka_progress_topic=first.kafka.progress_topic,
        kafka_transaction_timeout_ms=2000,
    )
    async with running_relay(second) as relay:
        await wait_drained(backend)
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    assert verdict.missing(all_ids) == set()
    assert verdict.duplicates == 0, "a row Kafka had was sent again"
    assert verdict.order_violations == []
    assert relay.stats.recovered > 0


async def test_a_second_producer_under_the_replicas_id_fences_it_and_it_starts_again(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("orders")
    settings = transactional(backend, kafka_bootstrap)
    async with running_relay(settings) as relay:
        emit_orders(backend, topic, 20, keys=5, seed=1)
        await wait_drained(backend)
        held = dict(relay.pipeline.held)
        assert held
        # Another producer takes the replica's transactional id: the relay's is fenced.
        usurper = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap,
            transactional_id=settings.kafka.transactional_id(settings.leases.replica_id),
        )
        await usurper.start()
        try:
            emit_orders(backend, topic, 50, keys=5, seed=2)
            await until(lambda: relay.stats.fenced >= 1, 60, "the relay's producer fenced")
            # It starts its producer again (fencing the usurper in turn), finds its leases
            # still its own in the database, and everything goes out once.
            await wait_drained(backend, 90)
            assert relay.stats.parked == 0
            assert dict(relay.pipeline.held) == held
        finally:
            await usurper.stop()
    delivered = event_ids(await read_topic(kafka_bootstrap, topic))
    assert sum(delivered.values()) == 70
    assert set(delivered.values()) == {1}


async def test_a_progress_topic_that_is_not_compacted_is_refused_at_start_up(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    progress = await new_topic("progress", configs={"cleanup.policy": "delete"})
    settings = transactional(backend, kafka_bootstrap, kafka_progress_topic=progress)
    with pytest.raises(ProgressTopicRefused, match=r"cleanup\.policy=delete; it must be compact"):
        await asyncio.wait_for(RelayService(settings).run(), 60)


@pytest.mark.usefixtures("patient_kafka_lookups")
async def test_the_progress_record_is_told_only_the_records_submitted(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """A record refused before sending (an illegal topic name) is not submitted: the
    trailer (the progress record) is not told of it, and goes out after the others."""
    topic = await new_topic("orders")
    trail = await new_topic("trail")
    publisher = KafkaPublisher(
        KafkaSettings(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10_000),
        KafkaSecurity.plaintext(),
    )
    told: list[list[int]] = []

    def trailer(submitted: list[int]) -> list[OutgoingRecord]:
        told.append(submitted)
        return [OutgoingRecord(trail, b"p", b"progress", [])]

    records = [
        OutgoingRecord("not a topic!", b"a", b"1", []),
        OutgoingRecord(topic, b"b", b"2", []),
    ]
    await publisher.start()
    try:
        outcomes = await publisher.publish_then(records, trailer)
    finally:
        await publisher.stop()
    assert told == [[1]]
    assert isinstance(outcomes[0], PublishFailed)
    assert outcomes[1:] == [ACKED, ACKED]
    assert [r.value for r in await read_topic(kafka_bootstrap, trail)] == [b"progress"]


async def test_a_topic_looked_up_after_start_takes_its_first_record_at_once(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transactional producer looks its progress topic up as it starts, so a new
    producer's first transaction does not find the topic still unknown (its progress
    record held, the transaction aborted). Without the look-up, no wait at all for an
    unknown topic holds its record."""
    monkeypatch.setattr(kafka_transport, "LOOKUP_WAIT_S", 0.0)
    known, unknown = await new_topic("known"), await new_topic("unknown")
    publisher = KafkaPublisher(
        KafkaSettings(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10_000),
        KafkaSecurity.plaintext(),
    )
    await publisher.start()
    try:
        await publisher.look_up(known)
        outcomes = await publisher.publish(
            [OutgoingRecord(known, b"k", b"1", []), OutgoingRecord(unknown, b"k", b"2", [])]
        )
    finally:
        await publisher.stop()
    assert outcomes == [ACKED, HELD]


async def test_a_takeover_reads_the_progress_topic_past_another_shards_open_transaction(
    kafka_bootstrap: str,
) -> None:
    """Shard 7's transaction is open on the progress topic when shard 0's commits after
    it: a reader stopping at the last stable offset would miss shard 0's record. The
    read goes on to the high watermark, past the open transaction once it ends."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        progress_topic=unique_topic_name("progress"),
        request_timeout_ms=10_000,
    )
    topic = ProgressTopic(settings, KafkaSecurity.plaintext())
    await topic.start()  # creates it, compacted
    run = uuid.uuid4().hex[:8]
    still_open = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{run}-7")
    committed = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{run}-0")
    await still_open.start()
    await committed.start()
    try:
        await still_open.begin_transaction()
        seven = Progress(7, 1, (70,)).record(settings.progress_topic)
        await (await still_open.send(seven.topic, seven.value, key=seven.key))
        zero = Progress(0, 3, (5, 6)).record(settings.progress_topic)
        async with committed.transaction():
            await (await committed.send(zero.topic, zero.value, key=zero.key))

        async def end_later() -> None:
            await asyncio.sleep(1.0)
            await still_open.abort_transaction()

        ending = asyncio.create_task(end_later())
        assert await topic.last([0, 7]) == {0: Progress(0, 3, (5, 6))}  # 7's was aborted
        await ending
    finally:
        await still_open.stop()
        await committed.stop()
        await topic.stop()


async def test_a_fence_met_by_the_transaction_begun_ahead_parks_nothing_and_sends_once(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """Another producer takes the replica's transactional id between two cycles; the
    next transaction, begun before the claim, meets the fence when its partitions are
    added, and aiokafka's sender stops on it. The cycle's records are held, none refused
    (a refusal would park its row), and the next cycle's new producer sends them once."""
    topic = await new_topic("orders")
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        transactions=True,
        transactional_id_prefix=f"test-{uuid.uuid4().hex[:8]}",
        progress_topic=unique_topic_name("progress"),
        request_timeout_ms=10_000,
    )

    async def holding(tokens: Mapping[int, int]) -> set[int]:
        return set(tokens)

    def claimed(id_: int) -> ClaimedRow:
        return ClaimedRow(id_, 0, f"e{id_}", topic, "k", "T", b"{}", "{}", 0, 0.0, None)

    def records(rows: list[ClaimedRow]) -> list[OutgoingRecord]:
        return [OutgoingRecord(topic, b"k", str(r.id).encode(), []) for r in rows]

    shards = ShardTransactions(settings, KafkaSecurity.plaintext(), "r1")
    usurper = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=settings.transactional_id("r1")
    )
    await shards.start()
    try:
        shards.taken(0, 1, None)
        await shards.ready({0: 1}, holding)
        first = [claimed(1)]
        assert await shards.publish_shards(first, records(first), {0: 1}) == [ACKED]
        await usurper.start()  # the fence
        await shards.ready({0: 1}, holding)  # begins the next transaction ahead
        await until(
            lambda: transaction_failure(shards._publisher.producer) is not None,
            30,
            "the producer's sender stopped on the fence",
        )
        second = [claimed(2), claimed(3)]
        outcomes = await shards.publish_shards(second, records(second), {0: 1})
        assert outcomes == [HELD, HELD]
        await shards.ready({0: 1}, holding)  # a new producer, fencing the usurper in turn
        assert await shards.publish_shards(second, records(second), {0: 1}) == [ACKED, ACKED]
    finally:
        await usurper.stop()
        await shards.stop()
    assert [r.value for r in await read_topic(kafka_bootstrap, topic)] == [b"1", b"2", b"3"]


async def test_a_plain_producer_fenced_is_replaced_and_its_shard_kept(
    backend: Backend, store: Store
) -> None:
    """Without transactions a fenced producer is a broken one: replaced (fatal), its rows
    not charged, its shard still this relay's (its lease released on shutdown)."""
    settings = relay_settings(backend, "127.0.0.1:9092", batch_size=20)  # never contacted
    (key,) = keys_on_shard(3, 1)
    emit(backend, event(key))
    publisher = MemoryPublisher(fail=lambda _: PublishFailed(FailureReason.FENCED, "fenced"))
    token = await store.lease_acquire(3, settings.leases.replica_id, 30)
    assert token is not None
    step = Step(settings.batch_rules(), store=store, publisher=publisher)
    sent = await step.send({3: token})
    outcome = await step.settled()
    assert sent is not None
    assert sent.fatal
    assert sent.fenced == frozenset()
    assert outcome is not None
    assert outcome.lost == frozenset()
    assert [r[8] for r in backend.fetch("outbox_rows")] == [0]  # not charged
