"""Turning payloads into bytes: JSON by default, bytes as they are, or your own."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from producer_lib.errors import SerializationError

JSON_CONTENT_TYPE = "application/json"
BYTES_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Serialized:
    data: bytes
    content_type: str


@runtime_checkable
class Serializer(Protocol):
    """Turns a payload into bytes and names their content type.

    Raise any exception for a payload it cannot handle: emit reports it as a
    SerializationError before anything is written.
    """

    def __call__(self, payload: object) -> Serialized: ...


def _json_default(value: Any) -> Any:
    # pydantic is a dependency already (pydantic-settings); models go through model_dump.
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class JsonSerializer:
    """JSON for dicts, lists, pydantic models, dataclasses and common scalars; bytes pass through."""

    def __call__(self, payload: object) -> Serialized:
        if isinstance(payload, bytes | bytearray | memoryview):
            return Serialized(bytes(payload), BYTES_CONTENT_TYPE)
        text = json.dumps(
            payload,
            default=_json_default,
            ensure_ascii=False,
            allow_nan=False,
            separators=(",", ":"),
        )
        return Serialized(text.encode("utf-8"), JSON_CONTENT_TYPE)


def serialize(serializer: Serializer, payload: object) -> Serialized:
    """Run a serializer, turning any failure into SerializationError."""
    try:
        result = serializer(payload)
    except Exception as exc:
        raise SerializationError(
            f"payload of type {type(payload).__name__} cannot be serialized: {exc}",
            field="payload",
        ) from exc
    if not isinstance(result, Serialized) or not isinstance(result.data, bytes):
        raise SerializationError(
            f"serializer {serializer!r} returned {type(result).__name__}, not Serialized(bytes)",
            field="payload",
        )
    return result
