"""What a caller asks to emit (Event) and the validated row it becomes (EventRow)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from outbox_core.kafka_names import MAX_TOPIC_CHARS, TOPIC_RULE, legal_topic
from outbox_core.sharding import shard_for
from outbox_core.tenants import MAX_TENANT_CHARS
from producer_lib.cloudevents import (
    attribute_headers,
    check_dataschema,
    check_extensions,
    check_subject,
)
from producer_lib.errors import InvalidEvent, PayloadTooLarge
from producer_lib.headers import build_headers, validate_user_headers
from producer_lib.idempotency import body_hash
from producer_lib.serialization import Serializer, serialize

MAX_KEY_CHARS = 1024
MAX_EVENT_TYPE_CHARS = 255
MAX_IDEMPOTENCY_KEY_CHARS = 255

DeliverAfter = dt.timedelta | dt.datetime


@dataclass(frozen=True)
class Event:
    """One event to emit; emit_batch takes a sequence of these."""

    topic: str
    key: str
    event_type: str
    payload: object
    headers: Mapping[str, str] | None = None
    event_id: uuid.UUID | str | None = None
    idempotency_key: str | None = None
    deliver_after: DeliverAfter | None = None
    tenant: str | None = None  # whose event: the relay's fair claims take turns by tenant
    # CloudEvents attributes, published by the relay's CloudEvents record formats.
    subject: str | None = None
    dataschema: str | None = None  # an absolute URI
    extensions: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_subject(self.subject)
        check_dataschema(self.dataschema)
        check_extensions(self.extensions)


@dataclass(frozen=True)
class EventRow:
    """A validated event, ready to insert."""

    event_id: uuid.UUID
    topic: str
    key: str
    shard: int
    event_type: str
    payload: bytes
    headers: dict[str, str]
    headers_json: str
    available_at: dt.datetime | None
    delay_s: float
    idempotency_key: str | None
    body_hash: bytes = field(repr=False)  # empty without an idempotency key
    tenant: str | None = None

    @property
    def size(self) -> int:
        """Bytes the relay will hand to Kafka for this record, near enough."""
        return (
            len(self.payload)
            + len(self.headers_json.encode())
            + len(self.key.encode())
            + len(self.event_type.encode())
            + 64  # event_id and event_type header names and the event_id value
        )


def _require_text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(f"{name} must be a str, not {type(value).__name__}", field=name)
    if not value.strip():
        raise InvalidEvent(f"{name} must not be empty", field=name)
    if len(value) > limit:
        raise InvalidEvent(f"{name} is longer than {limit} characters", field=name)
    if "\x00" in value:
        # Postgres text cannot hold NUL: refused here, alike on every database.
        raise InvalidEvent(f"{name} must not contain a NUL character", field=name)
    return value


def _event_id(value: uuid.UUID | str | None) -> uuid.UUID:
    if value is None:
        return uuid.uuid4()
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidEvent(f"event_id {value!r} is not a UUID", field="event_id") from None


def _deliver_after(value: DeliverAfter | None) -> tuple[dt.datetime | None, float]:
    if value is None:
        return None, 0.0
    if isinstance(value, dt.timedelta):
        if value < dt.timedelta(0):
            raise InvalidEvent("deliver_after must not be negative", field="deliver_after")
        return None, value.total_seconds()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidEvent(
                "deliver_after must be timezone-aware (a naive datetime is ambiguous)",
                field="deliver_after",
            )
        return value.astimezone(dt.UTC), 0.0
    raise InvalidEvent(
        f"deliver_after must be a timedelta or an aware datetime, not {type(value).__name__}",
        field="deliver_after",
    )


_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@functools.lru_cache(maxsize=64)
def _content_type_only(content_type: str) -> str:
    return _compact({"content-type": content_type})


def _headers_json(headers: dict[str, str]) -> str:
    # Most events carry only their content type: reuse that text.
    if len(headers) == 1 and "content-type" in headers:
        return _content_type_only(headers["content-type"])
    return _compact(headers)


def prepare(
    event: Event, *, serializer: Serializer, shard_count: int, max_event_bytes: int
) -> EventRow:
    """Validate and serialize; raises an InvalidEvent subclass before anything is written."""
    topic = _require_text(event.topic, "topic", MAX_TOPIC_CHARS)
    if not legal_topic(topic):
        raise InvalidEvent(
            f"topic {topic!r} is not a Kafka topic name ({TOPIC_RULE})", field="topic"
        )
    key = _require_text(event.key, "key", MAX_KEY_CHARS)
    event_type = _require_text(event.event_type, "event_type", MAX_EVENT_TYPE_CHARS)
    idempotency_key = None
    if event.idempotency_key is not None:
        idempotency_key = _require_text(
            event.idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS
        )
    tenant = None
    if event.tenant is not None:
        tenant = _require_text(event.tenant, "tenant", MAX_TENANT_CHARS)
    event_id = _event_id(event.event_id)
    available_at, delay_s = _deliver_after(event.deliver_after)
    # The attributes' ce_ names are refused as user headers, so the two never collide;
    # both are the event's body to an idempotency key.
    user = {
        **attribute_headers(event.subject, event.dataschema, event.extensions),
        **validate_user_headers(event.headers),
    }
    serialized = serialize(serializer, event.payload)
    headers = build_headers(user, serialized.content_type)
    row = EventRow(
        event_id=event_id,
        topic=topic,
        key=key,
        shard=shard_for(key, shard_count),
        event_type=event_type,
        payload=serialized.data,
        headers=headers,
        headers_json=_headers_json(headers),
        available_at=available_at,
        delay_s=delay_s,
        idempotency_key=idempotency_key,
        body_hash=(
            body_hash(topic, key, event_type, serialized.data, user, tenant)
            if idempotency_key
            else b""
        ),
        tenant=tenant,
    )
    if row.size > max_event_bytes:
        raise PayloadTooLarge(
            f"event of {row.size} bytes exceeds the limit of {max_event_bytes} bytes "
            "(max_event_bytes; keep it below the relay's Kafka max_request_size)",
            size=row.size,
            limit=max_event_bytes,
        )
    return row
