"""One relay step (relay.pipeline.step.Step.run: claim, publish, settle: the step the
relay's loop runs) on real Postgres and SQLite, with the library's in-memory publisher
standing in for Kafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from relay.config import RelaySettings
from relay.pipeline.step import BatchOutcome, Step
from relay.store import Store
from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.memory import MemoryPublisher
from relay.transport.records import OutgoingRecord
from tests.support.db import Backend
from tests.support.relay import FAST, relay_settings
from tests.support.stores import emit, event, keys_on_shard, row_states, snapshot

pytestmark = pytest.mark.integration

SHARD = 3
OTHER = 5
BOOTSTRAP = "127.0.0.1:9092"  # never contacted: MemoryPublisher stands in for Kafka
BACKOFF = float(FAST["backoff_base_s"])  # a row's first backoff is in [BACKOFF/2, BACKOFF]
# Tests that look at a row while it backs off use a longer one: a loaded machine still
# gets there before it ends.
HOLD = 0.8


def settings_for(backend: Backend, **over: Any) -> RelaySettings:
    # Most of these read a settled batch back as rows gone: the delete mode says so plainly.
    return relay_settings(backend, BOOTSTRAP, **{"batch_size": 100, "retention": "delete", **over})


async def lease(store: Store, settings: RelaySettings, shard: int = SHARD) -> int:
    token = await store.lease_acquire(shard, settings.leases.replica_id, 30)
    assert token is not None
    return token


async def run(
    store: Store, publisher: MemoryPublisher, settings: RelaySettings, token: int
) -> BatchOutcome:
    step = Step(settings.batch_rules(), store=store, publisher=publisher)
    return await step.run({SHARD: token})


def event_ids(backend: Backend) -> dict[int, str]:
    """Row id -> event_id of every row (read before the rows are published and deleted)."""
    return {int(r[0]): str(r[1]) for r in backend.fetch("outbox_rows")}


def sent(publisher: MemoryPublisher) -> list[str]:
    """event_ids of the acked records, in ack order."""
    return [dict(r.headers)["event_id"].decode() for r in publisher.sent]


def counts(outcome: BatchOutcome) -> tuple[int, int, int, int, int, bool, bool]:
    return (
        outcome.claimed,
        outcome.published,
        outcome.retried,
        outcome.parked,
        outcome.held_back,
        outcome.fatal_producer_error,
        outcome.full,
    )


def failing(
    event_ids: set[str], *, retriable: bool, fatal: bool = False, message: str = "broker said no"
) -> Callable[[OutgoingRecord], PublishFailed | None]:
    """A MemoryPublisher rule failing the records of these events: a broken producer
    (fatal), a passing broker condition (retriable) or a refusal for good."""
    if fatal:
        reason = FailureReason.PRODUCER_BROKEN
    else:
        reason = FailureReason.RETRIABLE if retriable else FailureReason.REFUSED

    def rule(record: OutgoingRecord) -> PublishFailed | None:
        if dict(record.headers)["event_id"].decode() in event_ids:
            return PublishFailed(reason, message)
        return None

    return rule


# ---------------------------------------------------------------------------- success


async def test_a_batch_publishes_in_id_order_and_deletes_the_rows(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    (x,) = keys_on_shard(OTHER, 1)
    ids = emit(backend, event(a), event(b), event(x), event(b), event(a))
    eid = event_ids(backend)
    settings = settings_for(backend)
    publisher = MemoryPublisher()
    token = await lease(store, settings)

    outcome = await run(store, publisher, settings, token)
    assert counts(outcome) == (4, 4, 0, 0, 0, False, False)
    # Commit-to-ack: one start per published row, each before the ack.
    assert len(outcome.published_created_at) == 4
    assert all(-1.0 < outcome.acked_at - c < 60.0 for c in outcome.published_created_at)
    # In id order per key (keys have no order between them, on Kafka as here).
    assert sent(publisher) == [eid[ids[0]], eid[ids[4]], eid[ids[1]], eid[ids[3]]]
    assert sorted(row_states(backend)) == [ids[2]]  # deleted; the other shard's row stays

    assert await run(store, publisher, settings, token) == BatchOutcome(0)
    assert len(publisher.sent) == 4


async def test_full_batches_say_more_is_waiting(backend: Backend, store: Store) -> None:
    keys = keys_on_shard(SHARD, 3)
    ids = emit(backend, *(event(keys[i % 3]) for i in range(5)))
    eid = event_ids(backend)
    settings = settings_for(backend, batch_size=2)
    publisher = MemoryPublisher()
    token = await lease(store, settings)

    outcomes = [await run(store, publisher, settings, token) for _ in range(4)]
    assert [(o.claimed, o.published, o.full) for o in outcomes] == [
        (2, 2, True),
        (2, 2, True),
        (1, 1, False),
        (0, 0, False),
    ]
    assert sent(publisher) == [eid[i] for i in ids]
    assert row_states(backend) == {}


async def test_keep_retention_marks_rows_published(backend: Backend, store: Store) -> None:
    a, b = keys_on_shard(SHARD, 2)
    ids = emit(backend, event(a), event(b), event(a))
    settings = settings_for(backend, retention="keep")
    publisher = MemoryPublisher()
    token = await lease(store, settings)

    assert counts(await run(store, publisher, settings, token)) == (3, 3, 0, 0, 0, False, False)
    states = row_states(backend)
    assert sorted(states) == ids
    assert all(s.published and s.attempts == 0 for s in states.values())
    assert await run(store, publisher, settings, token) == BatchOutcome(0)
    assert len(publisher.sent) == 3


async def test_outgoing_record_topic_key_value_and_headers(backend: Backend, store: Store) -> None:
    a, b = keys_on_shard(SHARD, 2)
    emit(
        backend,
        event(a, topic="orders", payload=b"\x00raw\xff", headers={"x-tenant": "acme"}),
        event(b, topic="payments", event_type="Charged", payload={"cents": 5}),
    )
    eid = list(event_ids(backend).values())
    settings = settings_for(backend, topic_prefix="prod.", topic_map={"orders": "sales.orders"})
    publisher = MemoryPublisher()
    await run(store, publisher, settings, await lease(store, settings))

    first, second = publisher.sent
    assert (first.topic, first.key, first.value) == (
        "prod.sales.orders",
        a.encode(),
        b"\x00raw\xff",
    )
    assert (second.topic, second.key, second.value) == ("prod.payments", b.encode(), b'{"cents":5}')
    assert first.headers[:2] == [("event_id", eid[0].encode()), ("event_type", b"OrderPlaced")]
    assert dict(first.headers[2:]) == {
        "content-type": b"application/octet-stream",
        "x-tenant": b"acme",
    }
    assert len(first.headers) == 4
    assert second.headers[:2] == [("event_id", eid[1].encode()), ("event_type", b"Charged")]
    assert second.headers[2:] == [("content-type", b"application/json")]


# ---------------------------------------------------------------------------- failures


async def test_retriable_ack_failure_backs_the_row_off_and_holds_its_key(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    a1, b1, a2, b2 = emit(backend, event(a), event(b), event(a), event(b))
    eid = event_ids(backend)
    settings = settings_for(backend, batch_size=2, backoff_base_s=HOLD)
    publisher = MemoryPublisher(fail=failing({eid[a1]}, retriable=True))
    token = await lease(store, settings)

    first = await run(store, publisher, settings, token)
    assert counts(first) == (2, 1, 1, 0, 0, False, True)
    state = row_states(backend)[a1]
    assert (state.attempts, state.status, state.last_error) == (1, "pending", "broker said no")
    assert 0.0 < state.available_in_s <= HOLD + 0.01  # persisted backoff, database clock
    # While a1 backs off, a2 waits behind it; b's rows go on.
    second = await run(store, publisher, settings, token)
    assert counts(second) == (1, 1, 0, 0, 0, False, False)
    assert sent(publisher) == [eid[b1], eid[b2]]

    backend.rewind(HOLD + 0.1)  # the backoff is over
    publisher.fail = None
    third = await run(store, publisher, settings, token)
    assert counts(third) == (2, 2, 0, 0, 0, False, True)
    assert sent(publisher) == [eid[b1], eid[b2], eid[a1], eid[a2]]
    assert row_states(backend) == {}


async def test_a_keys_rows_of_one_claim_fail_together_so_none_overtakes_another(
    backend: Backend, store: Store
) -> None:
    """A key's rows of one claim travel together (one record batch on Kafka, accepted or
    refused whole): when a1's ack fails, a2 (already handed over with it) is not published
    either, so a2 can never reach the topic before a1. Other keys are not touched."""
    a, b = keys_on_shard(SHARD, 2)
    a1, b1, a2 = emit(backend, event(a), event(b), event(a))
    eid = event_ids(backend)
    settings = settings_for(backend, backoff_base_s=HOLD)
    publisher = MemoryPublisher(fail=failing({eid[a1]}, retriable=True))

    token = await lease(store, settings)
    outcome = await run(store, publisher, settings, token)
    assert counts(outcome) == (3, 1, 2, 0, 0, False, False)
    assert sent(publisher) == [eid[b1]]
    states = row_states(backend)
    assert sorted(states) == [a1, a2]
    assert (states[a1].attempts, states[a2].attempts) == (1, 1)

    backend.rewind(HOLD + 0.1)  # the backoff is over
    publisher.fail = None
    await run(store, publisher, settings, token)
    assert sent(publisher) == [eid[b1], eid[a1], eid[a2]]


async def test_non_retriable_failure_parks_at_once(backend: Backend, store: Store) -> None:
    a, b = keys_on_shard(SHARD, 2)
    a1, b1 = emit(backend, event(a), event(b))
    eid = event_ids(backend)
    settings = settings_for(backend)
    publisher = MemoryPublisher(fail=failing({eid[a1]}, retriable=False, message="invalid record"))
    token = await lease(store, settings)

    assert counts(await run(store, publisher, settings, token)) == (2, 1, 0, 1, 0, False, False)
    state = row_states(backend)[a1]
    assert (state.attempts, state.status, state.last_error) == (1, "parked", "invalid record")
    assert sent(publisher) == [eid[b1]]
    # The parked row holds its key: a later row of a is not claimed, one of b is.
    a2, _b2 = emit(backend, event(a), event(b))
    assert counts(await run(store, publisher, settings, token)) == (1, 1, 0, 0, 0, False, False)
    assert sorted(row_states(backend)) == [a1, a2]


async def test_reaching_max_attempts_parks(backend: Backend, store: Store) -> None:
    x, y = keys_on_shard(SHARD, 2)
    (x1, _y1) = emit(backend, event(x), event(y))
    eid = event_ids(backend)
    settings = settings_for(backend, max_attempts=2)
    publisher = MemoryPublisher(fail=failing({eid[x1]}, retriable=True))
    token = await lease(store, settings)

    assert counts(await run(store, publisher, settings, token)) == (2, 1, 1, 0, 0, False, False)
    assert (row_states(backend)[x1].attempts, row_states(backend)[x1].status) == (1, "pending")
    backend.rewind(BACKOFF + 0.1)  # the backoff is over
    emit(backend, event(y))  # another key succeeds in the same batch
    assert counts(await run(store, publisher, settings, token)) == (2, 1, 0, 1, 0, False, False)
    state = row_states(backend)[x1]
    assert (state.attempts, state.status, state.last_error) == (2, "parked", "broker said no")
    assert sorted(row_states(backend)) == [x1]


async def test_a_record_too_large_for_kafka_is_parked_without_being_sent(
    backend: Backend, store: Store
) -> None:
    big_key, small_key = keys_on_shard(SHARD, 2)
    big, small, after = emit(
        backend,
        event(big_key, payload=b"x" * 1100),
        event(small_key, payload=b"y" * 500),
        event(big_key, payload=b"z"),
    )
    eid = event_ids(backend)
    settings = settings_for(backend, kafka_max_request_size=1024)
    publisher = MemoryPublisher()

    outcome = await run(store, publisher, settings, await lease(store, settings))
    assert counts(outcome) == (3, 1, 0, 1, 1, False, False)
    assert sent(publisher) == [eid[small]]  # nothing of the big row's key went out
    states = row_states(backend)
    assert sorted(states) == [big, after]
    assert (states[big].attempts, states[big].status) == (1, "parked")
    assert "kafka_max_request_size (1024)" in str(states[big].last_error)
    assert (states[after].attempts, states[after].status) == (0, "pending")


async def test_refusal_at_enqueue_holds_back_later_rows_of_its_key(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    a1, b1, a2, b2 = emit(backend, event(a), event(b), event(a), event(b))
    eid = event_ids(backend)
    settings = settings_for(backend, backoff_base_s=HOLD)
    publisher = MemoryPublisher(refuse=failing({eid[a1]}, retriable=True, message="queue full"))
    token = await lease(store, settings)

    outcome = await run(store, publisher, settings, token)
    assert counts(outcome) == (4, 2, 1, 0, 1, False, False)
    assert sent(publisher) == [eid[b1], eid[b2]]
    states = row_states(backend)
    assert sorted(states) == [a1, a2]
    assert (states[a1].attempts, states[a1].last_error) == (1, "queue full")
    assert (states[a2].attempts, states[a2].last_error) == (0, None)  # not tried, not charged
    assert await run(store, publisher, settings, token) == BatchOutcome(0)

    backend.rewind(HOLD + 0.1)  # the backoff is over
    publisher.refuse = None
    assert counts(await run(store, publisher, settings, token)) == (2, 2, 0, 0, 0, False, False)
    assert sent(publisher)[2:] == [eid[a1], eid[a2]]


async def test_skip_policy_sends_later_rows_of_a_failed_key(backend: Backend, store: Store) -> None:
    a, b = keys_on_shard(SHARD, 2)
    a1, b1, a2 = emit(backend, event(a, payload=b"x" * 1100), event(b), event(a))
    eid = event_ids(backend)
    settings = settings_for(backend, failure_policy="skip", kafka_max_request_size=1024)
    publisher = MemoryPublisher()

    outcome = await run(store, publisher, settings, await lease(store, settings))
    assert counts(outcome) == (3, 2, 0, 1, 0, False, False)
    assert sent(publisher) == [eid[b1], eid[a2]]
    assert sorted(row_states(backend)) == [a1]


@pytest.mark.parametrize("where", ["ack", "enqueue"])
async def test_kafka_unavailable_when_every_send_fails_and_nothing_is_settled(
    backend: Backend, store: Store, where: str
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    emit(backend, event(a), event(b), event(a))
    settings = settings_for(backend)
    down = failing(set(event_ids(backend).values()), retriable=True, message="no broker")
    publisher = MemoryPublisher(fail=down) if where == "ack" else MemoryPublisher(refuse=down)
    token = await lease(store, settings)
    before = snapshot(backend)

    with pytest.raises(TransportUnavailable) as info:
        await run(store, publisher, settings, token)
    assert info.value.error.retriable
    assert str(info.value.error) == "no broker"
    assert publisher.sent == []
    assert snapshot(backend) == before
    assert {s.attempts for s in row_states(backend).values()} == {0}


@pytest.mark.parametrize("where", ["ack", "enqueue"])
async def test_a_fatal_producer_error_is_reported(
    backend: Backend, store: Store, where: str
) -> None:
    a, b, c = keys_on_shard(SHARD, 3)
    a1, b1, c1 = emit(backend, event(a), event(b), event(c))
    eid = event_ids(backend)
    settings = settings_for(backend)
    broken = failing({eid[b1]}, retriable=True, fatal=True, message="ProducerFenced")
    publisher = MemoryPublisher(fail=broken) if where == "ack" else MemoryPublisher(refuse=broken)

    outcome = await run(store, publisher, settings, await lease(store, settings))
    assert counts(outcome) == (3, 2, 0, 0, 0, True, False)
    assert sent(publisher) == [eid[a1], eid[c1]]
    # A broken producer is not the row's fault: b1 stays pending and uncharged, to be sent
    # again by the recreated producer.
    state = row_states(backend)[b1]
    assert (state.attempts, state.status, state.last_error) == (0, "pending", None)
    assert sorted(row_states(backend)) == [b1]


async def test_a_wrong_token_settles_nothing_and_reports_the_shard_lost(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    (x,) = keys_on_shard(OTHER, 1)
    a1, _b1, _x1 = emit(backend, event(a), event(b), event(x))
    eid = event_ids(backend)
    settings = settings_for(backend)
    publisher = MemoryPublisher(fail=failing({eid[a1]}, retriable=True))
    token = await lease(store, settings)
    before = snapshot(backend)

    outcome = await run(store, publisher, settings, token + 1)
    assert outcome.lost == {SHARD}
    assert (outcome.claimed, outcome.published, outcome.retried) == (2, 0, 0)
    assert snapshot(backend) == before

    # A shard leased by another replica: its token does not make the write ours, and the
    # shards still ours in the same cycle are settled.
    other = await store.lease_acquire(OTHER, "relay-other", 30)
    assert other is not None
    step = Step(settings.batch_rules(), store=store, publisher=publisher)
    outcome = await step.run({SHARD: token, OTHER: other})
    assert outcome.lost == {OTHER}
    assert (outcome.claimed, outcome.published, outcome.retried) == (3, 1, 1)
    assert sorted(row_states(backend)) == [a1, _x1]


async def test_a_topic_level_failure_of_a_whole_batch_is_charged_not_a_kafka_outage(
    backend: Backend, store: Store
) -> None:
    """Every row's topic is unknown to Kafka: retriable, yet not the transport's fault. The
    rows are charged (backoff, then parked) so the shard is not held back forever."""
    a, b = keys_on_shard(SHARD, 2)
    a1, b1 = emit(backend, event(a), event(b))
    eid = event_ids(backend)
    settings = settings_for(backend)

    def unknown_topic(record: OutgoingRecord) -> PublishFailed | None:
        return PublishFailed(FailureReason.UNKNOWN_TOPIC, "UnknownTopicOrPartitionError")

    publisher = MemoryPublisher(fail=unknown_topic)
    outcome = await run(store, publisher, settings, await lease(store, settings))
    assert counts(outcome) == (2, 0, 2, 0, 0, False, False)
    assert sent(publisher) == []
    assert {r: (s.attempts, s.status) for r, s in row_states(backend).items()} == {
        a1: (1, "pending"),
        b1: (1, "pending"),
    }
    assert set(eid) == {a1, b1}
