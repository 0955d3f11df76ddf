"""The event a handler receives, decoded from a Kafka record: the relay's, in any of its
record formats, or a foreign producer's CloudEvent or Debezium outbox record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from consumer_lib import record_formats
from consumer_lib.errors import PoisonReason, PoisonRecord
from consumer_lib.record_formats import CloudEventAttributes, DebeziumHeaders, Shaped


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
    raw: bytes | None = field(default=None, repr=False)  # the record's value as it came
    # The CloudEvents attributes of a record in a CloudEvents shape; None otherwise.
    cloudevent: CloudEventAttributes | None = None


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


# Headers an event's identity is read from: a second copy with another value is forged.
_TRUSTED = frozenset(
    {"event_id", "event_type", "ce_id", "ce_source", "ce_type", "ce_specversion", "content-type"}
)


def _text(value: bytes | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise PoisonRecord(f"{what} is not UTF-8", PoisonReason.NOT_UTF8) from None


_DEBEZIUM = DebeziumHeaders()


def decode(record: SourceRecord, debezium: DebeziumHeaders = _DEBEZIUM) -> ConsumedEvent:
    """A Kafka ConsumerRecord (or a stream entry in its shape) -> ConsumedEvent, in whichever
    shape the record comes: the relay's native one, CloudEvents binary or structured, or
    Debezium's EventRouter (its id and type in the `debezium` headers). PoisonRecord when
    it cannot be decoded, whatever the decoding raised (RecursionError from deeply nested
    JSON, say): a record that cannot be read must never stop its partition."""
    try:
        return _decode(record, debezium)
    except PoisonRecord:
        raise
    except Exception as exc:
        raise PoisonRecord(f"cannot be decoded: {type(exc).__name__}: {exc}") from None


def _headers(record: SourceRecord, debezium: DebeziumHeaders) -> dict[str, str]:
    headers: dict[str, str] = {}
    trusted = _TRUSTED | {debezium.id, debezium.type}
    for name, value in record.headers or ():
        text = _text(value, f"header {name!r}") or ""
        if name in trusted and name in headers and headers[name] != text:
            # Which one is the producer's? Dedup trusts the id: never guess.
            raise PoisonRecord(
                f"header {name!r} appears twice with different values",
                PoisonReason.CONFLICTING_HEADERS,
            )
        headers[str(name)] = text
    return headers


def _shape(record: SourceRecord, debezium: DebeziumHeaders) -> Shaped:
    """The record read in the first shape it claims, in the order the formats are tried."""
    headers = _headers(record, debezium)
    key = _text(record.key, "key")
    value = record.value
    if "event_id" not in headers:
        if "ce_id" in headers:
            return record_formats.binary(value, key, headers)
        if record_formats.is_structured(headers.get("content-type")):
            return record_formats.structured(value, key, headers)
        if debezium.id in headers:
            return record_formats.debezium(value, key, headers, debezium)
    raw_id = headers.get("event_id")
    event_id = None
    if raw_id:
        try:
            event_id = uuid.UUID(raw_id)
        except ValueError:
            raise PoisonRecord(
                f"event_id header {raw_id!r} is not a UUID", PoisonReason.INVALID_EVENT_ID
            ) from None
    return Shaped(
        event_id=event_id,
        event_type=headers.get("event_type"),
        key=key,
        payload=record_formats.payload_of(value, headers.get("content-type")),
        headers=headers,
    )


def _decode(record: SourceRecord, debezium: DebeziumHeaders) -> ConsumedEvent:
    shaped = _shape(record, debezium)
    return ConsumedEvent(
        event_id=shaped.event_id,
        key=shaped.key,
        event_type=shaped.event_type,
        payload=shaped.payload,
        headers=shaped.headers,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
        raw=record.value,
        cloudevent=shaped.cloudevent,
    )
