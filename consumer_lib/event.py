"""The event a handler receives, decoded from a Kafka record written by the relay."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

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


def _text(value: bytes | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise PoisonRecord(f"{what} is not UTF-8") from None


def decode(record: Any) -> ConsumedEvent:
    """aiokafka ConsumerRecord -> ConsumedEvent; PoisonRecord when it cannot be decoded."""
    headers: dict[str, str] = {}
    for name, value in record.headers or ():
        text = _text(value, f"header {name!r}")
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
