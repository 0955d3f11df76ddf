"""RecordingOutbox: what users put in their own unit tests instead of a database."""

from __future__ import annotations

import uuid

import pytest

from producer_lib import (
    DuplicateEventId,
    Event,
    EventEmitter,
    IdempotencyConflict,
    InvalidEvent,
    RecordingOutbox,
)


class Service:
    def __init__(self, outbox: EventEmitter) -> None:
        self.outbox = outbox

    def place(self, order_id: int) -> None:
        self.outbox.emit(
            None,
            topic="orders",
            key=str(order_id),
            event_type="OrderPlaced",
            payload={"id": order_id},
        )


def test_records_what_a_service_emits() -> None:
    outbox = RecordingOutbox()
    Service(outbox).place(7)
    assert [(e.topic, e.key, e.event_type, e.json()) for e in outbox.events] == [
        ("orders", "7", "OrderPlaced", {"id": 7})
    ]
    assert outbox.by_topic("orders")[0].headers["content-type"] == "application/json"


def test_same_validation_as_the_real_outbox() -> None:
    with pytest.raises(InvalidEvent):
        RecordingOutbox().emit(None, topic="", key="k", event_type="E", payload={})


def test_transaction_rolls_back_on_error() -> None:
    outbox = RecordingOutbox()
    with pytest.raises(RuntimeError), outbox.transaction():
        outbox.emit(None, topic="t", key="k", event_type="E", payload={}, idempotency_key="i")
        raise RuntimeError
    assert outbox.events == []
    with outbox.transaction():
        outbox.emit_batch(None, [Event("t", "k", "E", {"n": 1}), Event("t", "k", "E", {"n": 2})])
        assert outbox.events == []  # not committed yet
    assert [e.json()["n"] for e in outbox.events] == [1, 2]


def test_idempotency_keys() -> None:
    outbox = RecordingOutbox()
    first = outbox.emit(
        None, topic="t", key="k", event_type="E", payload={"a": 1}, idempotency_key="i"
    )
    again = outbox.emit(
        None, topic="t", key="k", event_type="E", payload={"a": 1}, idempotency_key="i"
    )
    assert first == again
    assert len(outbox.events) == 1
    with pytest.raises(IdempotencyConflict):
        outbox.emit(None, topic="t", key="k", event_type="E", payload={"a": 2}, idempotency_key="i")


def test_a_reused_event_id_is_refused_as_the_database_refuses_it() -> None:
    outbox = RecordingOutbox()
    taken = uuid.uuid4()
    outbox.emit(None, topic="t", key="k", event_type="E", payload={}, event_id=taken)
    with pytest.raises(DuplicateEventId):
        outbox.emit(None, topic="t", key="k", event_type="E", payload={}, event_id=taken)
    # A batch is one statement: a reused id in it, or twice in it, writes none of it.
    with pytest.raises(DuplicateEventId):
        outbox.emit_batch(
            None, [Event("t", "k", "E", {}), Event("t", "k", "E", {}, event_id=taken)]
        )
    again = uuid.uuid4()
    with pytest.raises(DuplicateEventId):
        outbox.emit_batch(None, [Event("t", "k", "E", {}, event_id=again)] * 2)
    assert [e.event_id for e in outbox.events] == [taken]
    # An id freed by a rolled-back transaction may be used again.
    with pytest.raises(RuntimeError), outbox.transaction():
        outbox.emit(None, topic="t", key="k", event_type="E", payload={}, event_id=again)
        raise RuntimeError("rolled back")
    outbox.emit(None, topic="t", key="k", event_type="E", payload={}, event_id=again)
    # A retried emit with its idempotency key returns the first event, whatever its id.
    kept = uuid.uuid4()
    first = outbox.emit(
        None, topic="t", key="k", event_type="E", payload={}, event_id=kept, idempotency_key="i"
    )
    retried = outbox.emit_batch(
        None, [Event("t", "k", "E", {}, event_id=kept, idempotency_key="i")]
    )
    assert (first, retried) == (kept, [kept])


async def test_async_methods() -> None:
    outbox = RecordingOutbox()
    await outbox.emit_async(None, topic="t", key="k", event_type="E", payload={})
    await outbox.emit_batch_async(None, [Event("t", "k", "E", {})])
    assert len(outbox.events) == 2


def test_records_the_tenant() -> None:
    outbox = RecordingOutbox()
    outbox.emit(None, topic="orders", key="1", event_type="E", payload={}, tenant="acme")
    outbox.emit(None, topic="orders", key="2", event_type="E", payload={})
    assert [e.tenant for e in outbox.events] == ["acme", None]
    with pytest.raises(InvalidEvent):
        outbox.emit(None, topic="orders", key="3", event_type="E", payload={}, tenant="")
