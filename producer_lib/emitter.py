"""The emit signature: an emit method takes its connection and then Event's own arguments.

Event (events.py) is the one place the arguments are written. `emits` and `emits_async`
turn a method written as `emit(self, conn, event: Event)` into one called as
`emit(conn, topic=..., key=..., ...)`: the Event is built from exactly the arguments its
constructor takes, and mypy checks every call against that constructor (ParamSpec). So
the EventEmitter protocol, Outbox and RecordingOutbox cannot drift apart, and an
argument added to Event is one every emit takes.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from producer_lib.events import Event

P = ParamSpec("P")
S = TypeVar("S")
R = TypeVar("R")

SyncBody = Callable[[S, Any, Event], R]
AsyncBody = Callable[[S, Any, Event], Awaitable[R]]


def _signed(
    wrapper: Callable[..., Any], body: Callable[..., Any], build: Callable[..., Event]
) -> None:
    """help() and inspect.signature show what callers pass: conn, then build's arguments."""
    wrapper.__name__ = body.__name__
    wrapper.__qualname__ = body.__qualname__
    wrapper.__module__ = body.__module__
    wrapper.__doc__ = body.__doc__
    head = list(inspect.signature(body).parameters.values())[:2]  # self, conn
    fields = inspect.signature(build).parameters.values()
    returns = inspect.signature(body).return_annotation
    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*head, *fields], return_annotation=returns
    )


def taking(
    build: Callable[P, Event],
) -> Callable[[SyncBody[S, R]], Callable[Concatenate[S, Any, P], R]]:
    """A decorator: the method takes build's arguments in place of the event."""

    def decorate(body: SyncBody[S, R]) -> Callable[Concatenate[S, Any, P], R]:
        def emit(self: S, conn: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return body(self, conn, build(*args, **kwargs))

        _signed(emit, body, build)
        return emit

    return decorate


def taking_async(
    build: Callable[P, Event],
) -> Callable[[AsyncBody[S, R]], Callable[Concatenate[S, Any, P], Coroutine[Any, Any, R]]]:
    """taking for coroutine methods; the result stays a coroutine function."""

    def decorate(body: AsyncBody[S, R]) -> Callable[Concatenate[S, Any, P], Coroutine[Any, Any, R]]:
        async def emit(self: S, conn: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await body(self, conn, build(*args, **kwargs))

        _signed(emit, body, build)
        return emit

    return decorate


emits = taking(Event)
emits_async = taking_async(Event)


class EventEmitter(Protocol):
    """What services depend on: the Outbox, or RecordingOutbox in their unit tests.

    emit and emit_async take the connection, then Event's arguments by keyword:
    `emit(conn, topic=..., key=..., event_type=..., payload=..., headers=None,
    event_id=None, idempotency_key=None, deliver_after=None, tenant=None, subject=None,
    dataschema=None, extensions=None)`.
    """

    @emits
    def emit(self, conn: Any, event: Event) -> uuid.UUID: ...

    def emit_batch(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]: ...

    @emits_async
    async def emit_async(self, conn: Any, event: Event) -> uuid.UUID: ...

    async def emit_batch_async(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]: ...
