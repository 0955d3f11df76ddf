"""RecordingOutbox: an in-memory stand-in for Outbox in your own unit tests.

It validates and serializes exactly as Outbox does (same errors for bad input), applies
idempotency keys, and keeps what was emitted in memory instead of a database:

    outbox = RecordingOutbox()
    service = OrderService(outbox=outbox)
    service.place_order(...)
    assert [e.event_type for e in outbox.events] == ["OrderPlaced"]

Inside `with outbox.transaction():` events become visible only if the block succeeds,
like a database transaction that rolls back on error.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from producer_lib.emitter import emits, emits_async
from producer_lib.errors import DuplicateEventId
from producer_lib.events import Event, EventRow
from producer_lib.idempotency import reused
from producer_lib.outbox import Outbox


@dataclass(frozen=True)
class RecordedEvent:
    row: EventRow

    @property
    def event_id(self) -> uuid.UUID:
        return self.row.event_id

    @property
    def topic(self) -> str:
        return self.row.topic

    @property
    def key(self) -> str:
        return self.row.key

    @property
    def event_type(self) -> str:
        return self.row.event_type

    @property
    def tenant(self) -> str | None:
        return self.row.tenant

    @property
    def headers(self) -> dict[str, str]:
        return self.row.headers

    @property
    def payload(self) -> bytes:
        return self.row.payload

    def json(self) -> Any:
        return json.loads(self.row.payload)


class RecordingOutbox(Outbox):
    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._committed: list[RecordedEvent] = []
        self._pending: list[RecordedEvent] | None = None
        self._keys: dict[tuple[str, str], EventRow] = {}
        # outbox_events.event_id is unique: a reused id is refused as the database refuses it.
        self._ids: set[uuid.UUID] = set()

    @property
    def events(self) -> list[RecordedEvent]:
        """Committed events, in emit order."""
        return list(self._committed)

    def by_topic(self, topic: str) -> list[RecordedEvent]:
        return [e for e in self._committed if e.topic == topic]

    def clear(self) -> None:
        self._committed.clear()
        self._keys.clear()
        self._ids.clear()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        outer = self._pending
        self._pending = []
        keys_before, ids_before = dict(self._keys), set(self._ids)
        try:
            yield
        except BaseException:
            self._keys, self._ids = keys_before, ids_before
            raise
        else:
            (outer if outer is not None else self._committed).extend(self._pending)
        finally:
            self._pending = outer

    def _held(self, row: EventRow) -> bool:
        """An idempotency key seen before: the row returns that event and writes nothing."""
        return (
            row.idempotency_key is not None
            and (self._opts.scope, row.idempotency_key) in self._keys
        )

    def _record(self, row: EventRow) -> uuid.UUID:
        if row.idempotency_key is not None:
            # Held as outbox_idempotency holds it: per (scope, key), with the body's hash.
            held = (self._opts.scope, row.idempotency_key)
            seen = self._keys.get(held)
            if seen is not None:
                return reused(row, seen.body_hash, seen.event_id)
            self._keys[held] = row
        if row.event_id in self._ids:
            raise DuplicateEventId()
        self._ids.add(row.event_id)
        target = self._pending if self._pending is not None else self._committed
        target.append(RecordedEvent(row))
        return row.event_id

    @emits
    def emit(self, conn: Any, event: Event) -> uuid.UUID:
        """Record one event; conn is not used (pass None)."""
        return self._record(self.prepare(event))

    def emit_batch(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        rows = [self.prepare(e) for e in events]
        # One statement in the database: a reused event_id anywhere writes none of the batch.
        ids = [r.event_id for r in rows if not self._held(r)]
        if len(set(ids)) < len(ids) or self._ids.intersection(ids):
            raise DuplicateEventId()
        return [self._record(r) for r in rows]

    @emits_async
    async def emit_async(self, conn: Any, event: Event) -> uuid.UUID:
        return self._record(self.prepare(event))

    async def emit_batch_async(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        return self.emit_batch(conn, events)
