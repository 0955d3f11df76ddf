"""Claims bounded by bytes as well as rows, on real Postgres and SQLite files (and real
Kafka where rows are published): each shard's rows stop within its share of
claim_max_bytes, a prefix of its rows in id order; an event larger than the share is
claimed alone when its shard comes first; keys held behind an unrecorded failure are not
read at all."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from relay.pipeline.step import BatchOutcome, Step
from relay.store import ClaimedRow, Store
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import KafkaPublisher
from relay.transport.protocol import Outcome
from relay.transport.records import OutgoingRecord
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings
from tests.support.stores import claim, emit, event, keys_on_shard, opened_store, row_states

# These tests count what each cycle claimed and sent.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("patient_kafka_lookups")]

A, B = 3, 5  # two shards


def blob(n: int, size: int) -> bytes:
    """size bytes, the first 8 naming the event (its place in the key's order)."""
    return n.to_bytes(8, "big") + b"x" * (size - 8)


def by_shard(rows: list[ClaimedRow]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        found[row.shard].append(row.id)
    return dict(found)


async def test_each_shard_s_rows_stop_within_its_share(backend: Backend, store: Store) -> None:
    (a1, a2), (b1,) = keys_on_shard(A, 2), keys_on_shard(B, 1)
    on_a = emit(backend, *(event((a1, a2)[n % 2], payload=blob(n, 10_000)) for n in range(6)))
    on_b = emit(backend, *(event(b1, payload=blob(n, 10_000)) for n in range(4)))

    rows = await claim(store, [A, B], 500, "block_key", shard_bytes=25_000)

    # Two rows of each (20,000 bytes; a third would make 30,000), the first in id order.
    assert by_shard(rows) == {A: on_a[:2], B: on_b[:2]}
    # Rows still bound the claim as before.
    rows = await claim(store, [A, B], 1, "block_key", shard_bytes=10**9)
    assert by_shard(rows) == {A: on_a[:1], B: on_b[:1]}
    # A budget that takes every row takes them all, in order.
    rows = await claim(store, [A, B], 500, "block_key", shard_bytes=10**9)
    assert by_shard(rows) == {A: on_a, B: on_b}


async def test_an_event_larger_than_its_share_is_claimed_alone_when_its_shard_comes_first(
    backend: Backend, store: Store
) -> None:
    (a,), (b,) = keys_on_shard(A, 1), keys_on_shard(B, 1)
    big_a, small_a = emit(backend, event(a, payload=blob(0, 50_000)), event(a, payload=b"1"))
    (big_b,) = emit(backend, event(b, payload=blob(0, 60_000)))

    # The first shard's first row goes whatever its size, and nothing past the share.
    first = await claim(store, [A, B], 500, "block_key", shard_bytes=20_000)
    assert [r.id for r in first] == [big_a]
    second = await claim(store, [B, A], 500, "block_key", shard_bytes=20_000)
    assert [r.id for r in second] == [big_b]
    # Never a later row of a key without its earlier one: A's small row waits behind it.
    assert small_a not in {r.id for r in first + second}


async def test_keys_held_behind_a_failure_are_not_read(backend: Backend, store: Store) -> None:
    k, j = keys_on_shard(A, 2)
    _k1, j1, _k2 = emit(backend, event(k), event(j), event(k))
    rows = await claim(store, [A], 500, "block_key", held_keys=[k])
    assert [r.id for r in rows] == [j1]


async def drain(step: Step, shard: int, token: int, steps: int = 20) -> list[BatchOutcome]:
    outcomes: list[BatchOutcome] = []
    for _ in range(steps):
        outcome = await step.run({shard: token})
        if outcome.claimed == 0:
            return outcomes
        outcomes.append(outcome)
    raise AssertionError(f"not drained in {steps} steps: {outcomes}")


@asynccontextmanager
async def leased_step(
    backend: Backend, kafka_bootstrap: str, publisher_type: type[KafkaPublisher] = KafkaPublisher
) -> AsyncIterator[tuple[Step, int]]:
    """A step with a 100,000-byte budget on a real publisher, and shard A's lease token."""
    settings = relay_settings(backend, kafka_bootstrap, claim_max_bytes=100_000)
    publisher = publisher_type(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        async with opened_store(backend) as store:
            token = await store.lease_acquire(A, settings.leases.replica_id, 30)
            assert token is not None
            yield Step(settings.batch_rules(), store=store, publisher=publisher), token
    finally:
        await publisher.stop()


async def test_the_budget_cuts_a_key_s_run_and_the_key_s_order_holds(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """One shard, so its share is the whole budget, 100,000 bytes. K's rows of 40,000
    bytes go two by two; J's first row, 150,000 bytes, goes alone; every row reaches Kafka
    once, in its key's order."""
    topic = await new_topic("claimbytes")
    k, j = keys_on_shard(A, 2)
    emit(
        backend,
        event(k, topic=topic, payload=blob(1, 40_000)),
        event(k, topic=topic, payload=blob(2, 40_000)),
        event(j, topic=topic, payload=blob(1, 150_000)),
        event(k, topic=topic, payload=blob(3, 40_000)),
        event(k, topic=topic, payload=blob(4, 40_000)),
        event(j, topic=topic, payload=blob(2, 1_000)),
    )
    async with leased_step(backend, kafka_bootstrap) as (step, token):
        outcomes = await drain(step, A, token)
    # K1 K2 | J1 alone | K3 K4 J2: the cut never takes a later row of a key without the
    # earlier ones, and each claim held at most the budget but for the lone large event.
    assert [(o.claimed, o.published) for o in outcomes] == [(2, 2), (1, 1), (3, 3)]
    assert all(s.published for s in row_states(backend).values())
    records = await read_topic(kafka_bootstrap, topic)
    order: dict[bytes, list[int]] = defaultdict(list)
    for record in records:
        assert record.key is not None
        assert record.value is not None
        order[record.key].append(int.from_bytes(record.value[:8], "big"))
    assert order == {k.encode(): [1, 2, 3, 4], j.encode(): [1, 2]}


class FirstCallRefused(KafkaPublisher):
    """The real publisher, whose first call the 'broker' refuses whole (record too large:
    parked), so the first claim's keys block behind a failure its settle records."""

    calls = 0

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        self.calls += 1
        if self.calls == 1:
            return [PublishFailed(FailureReason.TOO_LARGE, "injected") for _ in records]
        return await super().publish(records)


async def test_the_claim_made_beside_the_acks_leaves_out_their_keys(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """A claim its byte budget cut has its acks awaited while the next claim is made:
    that claim leaves out every key in flight, so K2 never goes out while K1's failure is
    still unknown to the database; M's rows go beside them."""
    topic = await new_topic("claimahead")
    k, j, m = keys_on_shard(A, 3)
    k1, j1, m1, k2, m2 = emit(
        backend,
        event(k, topic=topic, payload=blob(1, 40_000)),
        event(j, topic=topic, payload=blob(1, 40_000)),
        event(m, topic=topic, payload=blob(1, 40_000)),
        event(k, topic=topic, payload=blob(2, 1_000)),
        event(m, topic=topic, payload=blob(2, 1_000)),
    )
    async with leased_step(backend, kafka_bootstrap, FirstCallRefused) as (step, token):
        first = await step.send({A: token}, ahead=True)
        second = await step.send({A: token}, ahead=True)
        await step.settled()
        third = await step.send({A: token}, ahead=True)
        await step.settled()
    assert first is not None
    assert second is not None
    assert [r.id for r in first.rows] == [k1, j1]  # a third 40,000 would pass the budget
    assert first.full
    assert [r.id for r in second.rows] == [m1, m2]  # claimed beside the first's acks
    assert third is None  # K2 waits behind the parked K1
    states = row_states(backend)
    assert not states[k2].published
    assert states[k1].status == "parked"
    records = await read_topic(kafka_bootstrap, topic)
    assert sorted((r.key, r.value[:8] if r.value else b"") for r in records) == [
        (m.encode(), blob(1, 8)),
        (m.encode(), blob(2, 8)),
    ]
