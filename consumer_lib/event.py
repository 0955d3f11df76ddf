"""The event a handler receives, decoded from a Kafka record written by the relay."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from consumer_lib.errors import PoisonRecord


@dataclass(frozen=True)
class ConsumedEvent:
    event_id: uuid.UUID | None
    key: str | None
    event_type: str | None
    payload: Any  # JSON decoded when the content type says JSON, else bytes
    headers: dict[str, str]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    raw: bytes | None = field(default=None, repr=False)


class SourceRecord(Protocol):
    """What the apply policy reads of a record: a Kafka ConsumerRecord, or a stream entry
    in that shape (consumer_lib.redis_entries)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...
    @property
    def timestamp(self) -> int: ...


# Headers the relay sets from the row's columns: a second copy is forged.
_TRUSTED = frozenset({"event_id", "event_type"})


def _text(value: bytes | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise PoisonRecord(f"{what} is not UTF-8") from None


def decode(record: SourceRecord) -> ConsumedEvent:
    """aiokafka ConsumerRecord -> ConsumedEvent; PoisonRecord when it cannot be decoded,
    whatever the decoding raised (RecursionError from deeply nested JSON, say): a record
    that cannot be read must never stop its partition."""
    try:
        return _decode(record)
    except PoisonRecord:
        raise
    except Exception as exc:
        raise PoisonRecord(f"cannot be decoded: {type(exc).__name__}: {exc}") from None


def _decode(record: SourceRecord) -> ConsumedEvent:
    headers: dict[str, str] = {}
    for name, value in record.headers or ():
        text = _text(value, f"header {name!r}")
        if name in _TRUSTED and name in headers and headers[name] != (text or ""):
            # Which one is the relay's? Dedup trusts event_id: never guess.
            raise PoisonRecord(f"header {name!r} appears twice with different values")
        headers[str(name)] = text or ""
    raw_id = headers.get("event_id")
    event_id = None
    if raw_id:
        try:
            event_id = uuid.UUID(raw_id)
        except ValueError:
            raise PoisonRecord(f"event_id header {raw_id!r} is not a UUID") from None
    payload: Any = record.value
    if headers.get("content-type", "").startswith("application/json") and record.value is not None:
        try:
            payload = json.loads(record.value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PoisonRecord(f"payload is not valid JSON: {exc}") from None
    return ConsumedEvent(
        event_id=event_id,
        key=_text(record.key, "key"),
        event_type=headers.get("event_type"),
        payload=payload,
        headers=headers,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
        raw=record.value,
    )
