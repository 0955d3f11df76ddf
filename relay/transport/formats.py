"""The record shapes other than the native one (records.py): CloudEvents' Kafka binding in
binary and structured mode, and Debezium's outbox EventRouter. Which topic takes which:
format_settings.py.

Like the native shape, each builds what the records of one (topic, event type, headers
text) share once and caches it; per row it adds only the event id, the time and (in
structured mode) the envelope around the payload, which is never decoded. A row header
that would make the record read as another shape or forge an attribute the relay sets
(event_id, ce_id, a header Debezium's id goes in...) is dropped, as the native shape
drops a row's event_id header.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping

from outbox_core.cloudevents import (
    DATASCHEMA,
    EXTENSION_NAME,
    HEADER_PREFIX,
    RESERVED_ATTRIBUTES,
    SPEC_VERSION,
    STRUCTURED_CONTENT_TYPE,
    SUBJECT,
    rfc3339,
)
from relay.store import ClaimedRow
from relay.transport.format_settings import FormatSettings, Placement, RecordFormat
from relay.transport.records import (
    Headers,
    MalformedRow,
    OutgoingRecord,
    RecordShape,
    encoded,
    parse_headers,
)

CONTENT_TYPE = "content-type"
TRACE_CONTEXT = ("traceparent", "tracestate")
_NATIVE_OWN = frozenset({"event_id", "event_type"})
_STORED_ATTRIBUTES = frozenset({SUBJECT, DATASCHEMA})
_CACHE = 1024
_SPEC_VERSION = (HEADER_PREFIX + "specversion", SPEC_VERSION.encode())
# The names and constant values of a binary record's per-row headers.
_BINARY_HEAD = len(_SPEC_VERSION[0]) + len(_SPEC_VERSION[1]) + len("ce_id") + len("ce_time")
_encode_text = json.encoder.encode_basestring  # C: a str as JSON text, quotes included


def _stored_attribute(name: str) -> bool:
    """A ce_ header holding an attribute the producer stores (subject, dataschema, an
    extension), spelt as producer_lib spells it."""
    if name in _STORED_ATTRIBUTES:
        return True
    attribute = name[len(HEADER_PREFIX) :]
    return (
        name.startswith(HEADER_PREFIX)
        and EXTENSION_NAME.fullmatch(attribute) is not None
        and attribute not in RESERVED_ATTRIBUTES
    )


class _RowHeaders:
    """A row's headers sorted for the shapes: its content type, the CloudEvents
    attributes it stores, its trace context and the rest; the headers that would forge
    another shape's or an attribute the relay sets are left out."""

    def __init__(self, headers_json: str, *, drop: frozenset[str] = frozenset()) -> None:
        self.content_type: str | None = None
        self.attributes: list[tuple[str, str]] = []  # (attribute name, value)
        self.trace: list[tuple[str, str]] = []
        self.others: list[tuple[str, str]] = []
        for name, value in parse_headers(headers_json).items():
            lowered = name.lower()
            if lowered in _NATIVE_OWN or lowered in drop:
                continue
            if name == CONTENT_TYPE:
                self.content_type = value
            elif lowered == CONTENT_TYPE:
                continue
            elif lowered.startswith(HEADER_PREFIX):
                if _stored_attribute(name):
                    self.attributes.append((name[len(HEADER_PREFIX) :], value))
            elif name in TRACE_CONTEXT:
                self.trace.append((name, value))
            else:
                self.others.append((name, value))

    def stored(self) -> list[tuple[str, str]]:
        """The row's headers as stored, less those left out."""
        kept = [] if self.content_type is None else [(CONTENT_TYPE, self.content_type)]
        return [
            *kept,
            *((HEADER_PREFIX + name, value) for name, value in self.attributes),
            *self.trace,
            *self.others,
        ]


def _json_content(content_type: str | None) -> bool:
    """A JSON payload (application/json or a +json type): embedded in the envelope as is."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class CloudEventsBinary:
    """Binary mode: the payload is the value, the attributes are ce_ headers, the
    datacontenttype the content-type header; partitionkey is the record's key."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._static = functools.lru_cache(maxsize=_CACHE)(self._shared)

    def _shared(self, event_type: str, headers_json: str) -> tuple[Headers, int]:
        row = _RowHeaders(headers_json)
        ce = HEADER_PREFIX
        return encoded(
            (
                (ce + "source", self._source),
                (ce + "type", event_type),
                *([] if row.content_type is None else [(CONTENT_TYPE, row.content_type)]),
                *((ce + name, value) for name, value in row.attributes),
                *((ce + name, value) for name, value in row.trace),
                *row.trace,  # kept plain too: OpenTelemetry's Kafka propagation reads them
                *row.others,
            )
        )

    def build(self, topic: str, row: ClaimedRow) -> tuple[OutgoingRecord, int]:
        static, static_size = self._static(row.event_type, row.headers_json)
        key, value, event_id = row.key.encode(), row.payload, row.event_id.encode()
        if not isinstance(value, bytes):
            raise MalformedRow
        time = rfc3339(row.created_at).encode()
        headers = [_SPEC_VERSION, ("ce_id", event_id), ("ce_time", time), *static]
        size = len(key) + len(value) + static_size + _BINARY_HEAD + len(event_id) + len(time)
        return OutgoingRecord(topic, key, value, headers), size


class CloudEventsStructured:
    """Structured mode: the value is the event as a JSON object, its payload embedded
    as JSON (a JSON content type) or as data_base64; the other headers stay."""

    _CONTENT_TYPE = (CONTENT_TYPE, f"{STRUCTURED_CONTENT_TYPE}; charset=utf-8".encode())

    def __init__(self, source: str) -> None:
        self._source = source
        self._static = functools.lru_cache(maxsize=_CACHE)(self._shared)

    def _shared(self, event_type: str, headers_json: str) -> tuple[bytes, bool, Headers, int]:
        """The envelope's members the records share (as JSON text), whether the payload
        is JSON, the Kafka headers and their size."""
        if not isinstance(event_type, str):  # json.dumps would write any JSON value
            raise MalformedRow
        row = _RowHeaders(headers_json)
        members: dict[str, str] = {"source": self._source, "type": event_type}
        if row.content_type is not None:
            members["datacontenttype"] = row.content_type
        members.update(row.attributes)
        members.update(row.trace)
        try:
            text = json.dumps(members, ensure_ascii=False, separators=(",", ":"))
            shared = text[1:-1].encode()
        except UnicodeEncodeError:  # a lone surrogate, which JSON text can spell
            raise MalformedRow("headers hold text that is not valid Unicode") from None
        headers, size = encoded((*row.trace, *row.others))
        headers = (self._CONTENT_TYPE, *headers)
        size += len(self._CONTENT_TYPE[0]) + len(self._CONTENT_TYPE[1])
        return shared, _json_content(row.content_type), headers, size

    def build(self, topic: str, row: ClaimedRow) -> tuple[OutgoingRecord, int]:
        shared, is_json, static, static_size = self._static(row.event_type, row.headers_json)
        key, payload = row.key.encode(), row.payload
        if not isinstance(payload, bytes):
            raise MalformedRow
        head = (
            f'{{"specversion":"{SPEC_VERSION}","id":{_encode_text(row.event_id)},'
            f'"time":"{rfc3339(row.created_at)}","partitionkey":{_encode_text(row.key)},'
        ).encode()
        if is_json:
            value = b"".join((head, shared, b',"data":', payload, b"}"))
        else:
            data = base64.b64encode(payload)
            value = b"".join((head, shared, b',"data_base64":"', data, b'"}'))
        return OutgoingRecord(topic, key, value, list(static)), len(key) + len(value) + static_size


class DebeziumOutbox:
    """As Debezium's outbox EventRouter writes a row with a string key converter and a
    byte-array value converter: the payload as the value, the event id in the id header,
    the placed columns in theirs; the row's own headers stay."""

    def __init__(self, id_header: str, placements: tuple[Placement, ...]) -> None:
        self._id_header = id_header
        self._per_row = tuple(p for p in placements if p.column in ("event_id", "created_at"))
        self._shared_placements = tuple(p for p in placements if p not in self._per_row)
        self._drop = frozenset(h.lower() for h in (id_header, *(p.header for p in placements)))
        self._static = functools.lru_cache(maxsize=_CACHE)(self._shared)

    def _shared(
        self, topic: str, event_type: str, tenant: str | None, headers_json: str
    ) -> tuple[Headers, int]:
        columns = {"event_type": event_type, "topic": topic, "tenant": tenant}
        placed = [(p.header, columns[p.column]) for p in self._shared_placements]
        row = _RowHeaders(headers_json, drop=self._drop)
        # A NULL column (an untenanted row) gets no header.
        return encoded((*((h, v) for h, v in placed if v is not None), *row.stored()))

    def build(self, topic: str, row: ClaimedRow) -> tuple[OutgoingRecord, int]:
        static, static_size = self._static(row.topic, row.event_type, row.tenant, row.headers_json)
        key, value, event_id = row.key.encode(), row.payload, row.event_id.encode()
        if not isinstance(value, bytes):
            raise MalformedRow
        headers = [(self._id_header, event_id)]
        for placement in self._per_row:
            text = event_id if placement.column == "event_id" else rfc3339(row.created_at).encode()
            headers.append((placement.header, text))
        headers += static
        size = len(key) + len(value) + static_size
        for name, text in headers[: 1 + len(self._per_row)]:
            size += len(name) + len(text)
        return OutgoingRecord(topic, key, value, headers), size


class RecordShapes:
    """Each format's shape, built once (its caches live as long as the relay), and the
    shape of a row topic; None for the native shape, which records.py builds itself."""

    def __init__(self, settings: FormatSettings) -> None:
        self._settings = settings
        source = settings.cloudevents_source or ""
        self._shapes: Mapping[RecordFormat, RecordShape] = {
            RecordFormat.CLOUDEVENTS_BINARY: CloudEventsBinary(source),
            RecordFormat.CLOUDEVENTS_STRUCTURED: CloudEventsStructured(source),
            RecordFormat.DEBEZIUM: DebeziumOutbox(
                settings.debezium_id_header, settings.placements()
            ),
        }

    def shape_of(self, row_topic: str) -> RecordShape | None:
        return self._shapes.get(self._settings.format_of(row_topic))
