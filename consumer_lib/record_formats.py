"""The record shapes other than the relay's native one: CloudEvents (Kafka protocol binding
1.0, binary and structured mode) and Debezium's outbox EventRouter. Each is read into the
fields a ConsumedEvent takes; a record that claims a shape and breaks it is a PoisonRecord.

A record's shape is recognised per record (consumer_lib.event.decode), so one topic may
carry all of them. An id that is not a UUID (a foreign producer's) becomes a uuid5 under
EVENT_ID_NAMESPACE: the same event always gets the same event_id, so dedup holds.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer_lib.errors import PoisonReason, PoisonRecord
from outbox_core.record_formats import (
    DEBEZIUM_ID_HEADER,
    DEBEZIUM_TYPE_HEADER,
    HEADER_PREFIX,
    RESERVED_ATTRIBUTES,
    STRUCTURED_CONTENT_TYPE,
    json_content_type,
)

# The namespace of the event_ids made from ids that are not UUIDs; fixed for good: a new
# one would give every such event already applied a new event_id.
EVENT_ID_NAMESPACE = uuid.UUID("6f1b2c1e-7a53-5b8e-9d0c-3e2f4a5b6c7d")

_REQUIRED = ("id", "source", "type", "specversion")
_OPTIONAL = ("time", "subject", "dataschema", "datacontenttype")
_TRACE = ("traceparent", "tracestate")
# Only the canonical text counts as a UUID: uuid.UUID() also takes braces, a urn: prefix
# and underscores, and two such spellings of one foreign id would share an event_id.
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


@dataclass(frozen=True)
class CloudEventAttributes:
    """The CloudEvents attributes of a record in either CloudEvents mode. extensions holds
    the extension attributes but partitionkey (the event's key) and traceparent/tracestate
    (in its headers)."""

    id: str
    source: str
    type: str
    specversion: str
    time: str | None = None
    subject: str | None = None
    dataschema: str | None = None
    datacontenttype: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Shaped:
    """What a shape gives the event: its identity, type, key, payload and headers."""

    event_id: uuid.UUID | None
    event_type: str | None
    key: str | None
    payload: Any
    headers: dict[str, str]
    cloudevent: CloudEventAttributes | None = None


@dataclass(frozen=True)
class DebeziumHeaders:
    """The headers a Debezium EventRouter record carries its event id and type in."""

    id: str = DEBEZIUM_ID_HEADER
    type: str = DEBEZIUM_TYPE_HEADER


def is_structured(content_type: str | None) -> bool:
    return (content_type or "").strip().lower().startswith(STRUCTURED_CONTENT_TYPE)


def payload_of(value: bytes | None, content_type: str | None) -> Any:
    """JSON decoded when the content type says JSON, else the bytes as they are."""
    if value is None or not json_content_type(content_type):
        return value
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PoisonRecord(
            f"payload is not valid JSON: {exc}", PoisonReason.INVALID_PAYLOAD
        ) from None


def foreign_event_id(name: str) -> uuid.UUID:
    """The id as a UUID when it is one; else a uuid5 of it (the same name, the same id)."""
    if _CANONICAL_UUID.fullmatch(name):
        return uuid.UUID(name)
    return uuid.uuid5(EVENT_ID_NAMESPACE, name)


# --------------------------------------------------------------------------- CloudEvents


def _bad(mode: str, name: str, what: str) -> PoisonRecord:
    return PoisonRecord(f"{mode} CloudEvent's {name!r} {what}", PoisonReason.INVALID_ATTRIBUTE)


def _text(mode: str, name: str, value: Any, *, extension: bool = False) -> str:
    """An attribute's value as text: a string, or for an extension also the integer or
    boolean CloudEvents allows; anything else is not an attribute."""
    if isinstance(value, str):
        return value
    if extension and isinstance(value, bool):
        return "true" if value else "false"
    if extension and isinstance(value, int):
        return str(value)
    raise _bad(mode, name, f"is a {type(value).__name__}, not a string")


def cloudevent_attributes(found: Mapping[str, Any], mode: str) -> CloudEventAttributes:
    """The attributes of a CloudEvent from its attribute names and values (a JSON null is
    an absent attribute); PoisonRecord when a required one is missing or empty, or one is
    not a string."""
    present = {name: value for name, value in found.items() if value is not None}
    for name in _REQUIRED:
        if name not in present:
            raise PoisonRecord(
                f"{mode} CloudEvent without {name!r}", PoisonReason.MISSING_ATTRIBUTE
            )
        if not _text(mode, name, present[name]):
            raise _bad(mode, name, "is empty")
    if "\x00" in present["source"]:
        # The event_id of a non-UUID id joins source and id with NUL: one inside the source
        # could make two events' ids collide. A URI-reference never holds one.
        raise _bad(mode, "source", "holds NUL")
    core = {
        name: _text(mode, name, present[name])
        for name in (*_REQUIRED, *_OPTIONAL)
        if name in present
    }
    extensions = {
        name: _text(mode, name, value, extension=True)
        for name, value in present.items()
        # partitionkey and the trace context are carried elsewhere: the key and the headers.
        if name not in RESERVED_ATTRIBUTES
    }
    return CloudEventAttributes(**core, extensions=extensions)


def cloudevent_id(attributes: CloudEventAttributes) -> uuid.UUID:
    """A CloudEvent's id is unique per source: a non-UUID id is named with its source."""
    if _CANONICAL_UUID.fullmatch(attributes.id):
        return uuid.UUID(attributes.id)
    return foreign_event_id(f"{attributes.source}\x00{attributes.id}")


def binary(value: bytes | None, key: str | None, headers: dict[str, str]) -> Shaped:
    """Binary mode: the attributes in ce_ headers, datacontenttype in content-type, the
    data as the record's value."""
    if "ce_specversion" not in headers:
        raise PoisonRecord(
            "binary CloudEvent with ce_id but no ce_specversion", PoisonReason.MISSING_ATTRIBUTE
        )
    found: dict[str, Any] = {
        name[len(HEADER_PREFIX) :]: text
        for name, text in headers.items()
        if name.startswith(HEADER_PREFIX)
    }
    if "content-type" in headers:
        found["datacontenttype"] = headers["content-type"]
    attributes = cloudevent_attributes(found, "binary")
    return Shaped(
        event_id=cloudevent_id(attributes),
        event_type=attributes.type,
        key=key,
        payload=payload_of(value, attributes.datacontenttype),
        headers=headers,
        cloudevent=attributes,
    )


def structured(value: bytes | None, key: str | None, headers: dict[str, str]) -> Shaped:
    """Structured mode: the record's value is the event as a JSON object."""
    try:
        envelope = json.loads(value if value is not None else b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise PoisonRecord(
            f"structured CloudEvent is not JSON: {exc}", PoisonReason.INVALID_ENVELOPE
        ) from None
    if not isinstance(envelope, dict):
        raise PoisonRecord(
            f"structured CloudEvent is a JSON {type(envelope).__name__}, not an object",
            PoisonReason.INVALID_ENVELOPE,
        )
    attributes = cloudevent_attributes(envelope, "structured")
    content_type = attributes.datacontenttype
    if "data" in envelope and "data_base64" in envelope:
        raise PoisonRecord(
            "structured CloudEvent with both data and data_base64", PoisonReason.INVALID_ENVELOPE
        )
    payload: Any = envelope.get("data")
    if "data_base64" in envelope:
        payload = payload_of(_base64(envelope["data_base64"]), content_type)
    elif isinstance(payload, str) and content_type and not json_content_type(content_type):
        payload = payload.encode()  # text data: bytes, as the binary mode's value would be
    # The headers as a native record's: the payload's content type, the trace context.
    shown = {name: text for name, text in headers.items() if name != "content-type"}
    if content_type is not None:
        shown["content-type"] = content_type
    for name in _TRACE:
        carried = envelope.get(name)
        if isinstance(carried, str) and name not in shown:
            shown[name] = carried
    partition_key = envelope.get("partitionkey")
    return Shaped(
        event_id=cloudevent_id(attributes),
        event_type=attributes.type,
        key=key if key is not None or not isinstance(partition_key, str) else partition_key,
        payload=payload,
        headers=shown,
        cloudevent=attributes,
    )


def _base64(data: Any) -> bytes:
    if not isinstance(data, str):
        raise PoisonRecord(
            f"structured CloudEvent's data_base64 is a {type(data).__name__}, not a string",
            PoisonReason.INVALID_PAYLOAD,
        )
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise PoisonRecord(
            "structured CloudEvent's data_base64 is not base64", PoisonReason.INVALID_PAYLOAD
        ) from None


# --------------------------------------------------------------------------- Debezium


def debezium(
    value: bytes | None, key: str | None, headers: dict[str, str], names: DebeziumHeaders
) -> Shaped:
    """Debezium's EventRouter: the event id and type in headers, the payload as the value."""
    raw_id = headers[names.id]
    if not raw_id:
        raise PoisonRecord(f"Debezium {names.id!r} header is empty", PoisonReason.INVALID_EVENT_ID)
    return Shaped(
        event_id=foreign_event_id(raw_id),
        event_type=headers.get(names.type),
        key=key,
        payload=payload_of(value, headers.get("content-type")),
        headers=headers,
    )
