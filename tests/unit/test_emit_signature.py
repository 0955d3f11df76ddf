"""emit's arguments are written once, as Event's: the EventEmitter protocol, Outbox and
RecordingOutbox all take the connection and then exactly Event's arguments."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from producer_lib import Event, EventEmitter, Outbox, RecordingOutbox

# mypy checks that each class satisfies the protocol, argument by argument.
EMITTERS: tuple[type[EventEmitter], ...] = (Outbox, RecordingOutbox)


@pytest.mark.parametrize("method", ["emit", "emit_async"])
@pytest.mark.parametrize("cls", [EventEmitter, *EMITTERS], ids=lambda c: c.__name__)
def test_emit_takes_the_connection_then_the_event_arguments(cls: type, method: str) -> None:
    emit = getattr(cls, method)
    expected = ["self", "conn", *(f.name for f in dataclasses.fields(Event))]
    assert list(inspect.signature(emit).parameters) == expected
    assert inspect.iscoroutinefunction(emit) == method.endswith("_async")


def test_an_argument_event_does_not_take_is_refused() -> None:
    outbox = RecordingOutbox()
    with pytest.raises(TypeError, match="colour"):
        outbox.emit(None, topic="t", key="k", event_type="E", payload={}, colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="payload"):
        outbox.emit(None, topic="t", key="k", event_type="E")  # type: ignore[call-arg]
    assert outbox.events == []


async def test_an_argument_event_does_not_take_is_refused_by_emit_async() -> None:
    outbox = RecordingOutbox()
    with pytest.raises(TypeError, match="colour"):
        await outbox.emit_async(None, topic="t", key="k", event_type="E", payload={}, colour=1)  # type: ignore[call-arg]
    assert outbox.events == []


def test_emit_keeps_its_documentation() -> None:
    assert Outbox.emit.__doc__ is not None
    assert "idempotency_key" in Outbox.emit.__doc__
    assert Outbox.emit.__name__ == "emit"
