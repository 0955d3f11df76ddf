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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from producer_lib.errors import IdempotencyConflict
from producer_lib.events import DeliverAfter, Event, EventRow
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
        self._keys: dict[str, EventRow] = {}

    @property
    def events(self) -> list[RecordedEvent]:
        """Committed events, in emit order."""
        return list(self._committed)

    def by_topic(self, topic: str) -> list[RecordedEvent]:
        return [e for e in self._committed if e.topic == topic]

    def clear(self) -> None:
        self._committed.clear()
        self._keys.clear()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        outer = self._pending
        self._pending = []
        keys_before = dict(self._keys)
        try:
            yield
        except BaseException:
            self._keys = keys_before
            raise
        else:
            (outer if outer is not None else self._committed).extend(self._pending)
        finally:
            self._pending = outer

    def _record(self, row: EventRow) -> uuid.UUID:
        if row.idempotency_key is not None:
            seen = self._keys.get(row.idempotency_key)
            if seen is not None:
                if seen.body_hash != row.body_hash:
                    raise IdempotencyConflict(
                        f"idempotency key {row.idempotency_key!r} was used for event "
                        f"{seen.event_id} with a different body",
                        idempotency_key=row.idempotency_key,
                        existing_event_id=str(seen.event_id),
                    )
                return seen.event_id
            self._keys[row.idempotency_key] = row
        target = self._pending if self._pending is not None else self._committed
        target.append(RecordedEvent(row))
        return row.event_id

    def emit(
        self,
        conn: Any = None,
        *,
        topic: str,
        key: str,
        event_type: str,
        payload: object,
        headers: Mapping[str, str] | None = None,
        event_id: uuid.UUID | str | None = None,
        idempotency_key: str | None = None,
        deliver_after: DeliverAfter | None = None,
        tenant: str | None = None,
    ) -> uuid.UUID:
        event = Event(
            topic,
            key,
            event_type,
            payload,
            headers,
            event_id,
            idempotency_key,
            deliver_after,
            tenant,
        )
        return self._record(self.prepare(event))

    def emit_batch(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        rows = [self.prepare(e) for e in events]
        return [self._record(r) for r in rows]

    async def emit_async(
        self,
        conn: Any = None,
        *,
        topic: str,
        key: str,
        event_type: str,
        payload: object,
        headers: Mapping[str, str] | None = None,
        event_id: uuid.UUID | str | None = None,
        idempotency_key: str | None = None,
        deliver_after: DeliverAfter | None = None,
        tenant: str | None = None,
    ) -> uuid.UUID:
        return self.emit(
            conn,
            topic=topic,
            key=key,
            event_type=event_type,
            payload=payload,
            headers=headers,
            event_id=event_id,
            idempotency_key=idempotency_key,
            deliver_after=deliver_after,
            tenant=tenant,
        )

    async def emit_batch_async(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        return self.emit_batch(conn, events)
