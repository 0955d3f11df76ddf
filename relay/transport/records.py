"""The outgoing record, whatever the transport, and how claimed rows become records: the
row's own bytes, its key, and headers (event_id, event_type and the row's headers). The
payload is never decoded.

A row that cannot become a record (headers that are not a JSON object of strings, a key,
topic or payload of the wrong type: rows written around producer_lib, or before the
headers constraint) is reported with what is wrong with it, never raised: the other rows
of the claim go out, and the step parks it (FailureReason.MALFORMED_ROW).

This runs once per event, so it is one loop with no call per row beyond the encodes: the
event type and header set (a producer uses few) are encoded once and cached with their
size, which makes each record's exact size a few additions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from relay.store import ClaimedRow


class OutgoingRecord(NamedTuple):
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        size = len(self.key) + len(self.value)
        for name, value in self.headers:
            size += len(name) + len(value)
        return size


Headers = tuple[tuple[str, bytes], ...]

EVENT_ID = "event_id"  # the one header that differs per row
# The relay's own headers, from the row's columns. A row's headers column naming them (a
# row not written by producer_lib, which refuses them) must not shadow them: a consumer
# trusts event_id for its dedup. Any spelling is dropped.
_OWN = frozenset({EVENT_ID, "event_type"})


class MalformedRow(ValueError):
    """What is wrong with a row that cannot become a record (the message is its
    last_error)."""


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), "a number")


def parse_headers(headers_json: str) -> dict[str, str]:
    """The row's headers column, which must be a JSON object of strings."""
    try:
        parsed = json.loads(headers_json)
    except (ValueError, TypeError, RecursionError) as exc:
        raise MalformedRow(f"headers are not JSON ({type(exc).__name__})") from None
    if not isinstance(parsed, dict):
        raise MalformedRow(f"headers are {_json_type(parsed)}, not a JSON object")
    wrong = next((k for k, v in parsed.items() if not isinstance(v, str)), None)
    if wrong is not None:
        raise MalformedRow(f"header {wrong[:128]!r} is {_json_type(parsed[wrong])}, not a string")
    return parsed


def encoded(headers: Iterable[tuple[str, str]]) -> tuple[Headers, int]:
    """Headers as they go on the wire, and their size."""
    try:
        out: Headers = tuple((name, value.encode()) for name, value in headers)
    except UnicodeEncodeError:  # a lone surrogate, which JSON text can spell
        raise MalformedRow("headers hold text that is not valid Unicode") from None
    return out, sum(len(name) + len(value) for name, value in out)


@functools.lru_cache(maxsize=1024)
def _headers(event_type: str, headers_json: str) -> tuple[Headers, int]:
    parsed = parse_headers(headers_json)
    return encoded(
        (("event_type", event_type), *((k, v) for k, v in parsed.items() if k.lower() not in _OWN))
    )


class RecordShape(Protocol):
    """A record format other than the native one (formats.py): builds a row's record and
    its size, raising (anything) for a row that cannot become one."""

    def build(self, topic: str, row: ClaimedRow) -> tuple[OutgoingRecord, int]: ...


def _malformed(row: ClaimedRow, topic_of: Mapping[str, str]) -> str:
    """Why this row cannot become a record (its build raised)."""
    for column, value, types in (
        ("topic", row.topic, str),
        ("key", row.key, str),
        ("event_id", row.event_id, str),
        ("event_type", row.event_type, str),
        ("headers", row.headers_json, str),
        ("payload", row.payload, bytes),
    ):
        if not isinstance(value, types):
            return f"malformed row: its {column} is a {type(value).__name__}, not {types.__name__}"
    if row.topic not in topic_of:
        return "malformed row: its topic has no Kafka topic"
    try:
        _headers(row.event_type, row.headers_json)  # what every shape reads of them
        row.key.encode()
        row.event_id.encode()
        row.event_type.encode()
    except MalformedRow as exc:
        return f"malformed row: {exc}"
    except Exception as exc:  # anything else a hostile writer found: the row, not the relay
        return f"malformed row: {type(exc).__name__}"
    return "malformed row"


_NO_RECORD = OutgoingRecord("", b"", b"", [])  # a malformed row's place in the records


# tuple.__new__ builds the NamedTuple without its Python-level __new__.
_record = functools.partial(tuple.__new__, OutgoingRecord)


def to_records(
    rows: Sequence[ClaimedRow],
    topic_of: Mapping[str, str],
    limit: int,
    shapes: Mapping[str, RecordShape] | None = None,
) -> tuple[list[OutgoingRecord], dict[int, int], dict[int, str]]:
    """The rows' records, in order; {index: size} of those larger than limit bytes (key,
    value and headers, as OutgoingRecord.size counts them); and {index: what is wrong} of
    the rows that cannot become a record (their places in the records hold no record).
    shapes: the record format of a row topic that is not published natively."""
    records: list[OutgoingRecord] = []
    append = records.append
    oversized: dict[int, int] = {}
    malformed: dict[int, str] = {}
    shape_of = (shapes or {}).get
    for i, row in enumerate(rows):
        try:  # free until a row raises: the common claim pays nothing for the check
            shape = shape_of(row.topic) if shapes else None
            if shape is not None:
                record, size = shape.build(topic_of[row.topic], row)
                append(record)
                if size > limit:
                    oversized[i] = size
                continue
            static, static_size = _headers(row.event_type, row.headers_json)
            key, value, event_id = row.key.encode(), row.payload, row.event_id.encode()
            if not isinstance(value, bytes):
                raise MalformedRow
            size = len(key) + len(value) + static_size + len(EVENT_ID) + len(event_id)
            append(_record((topic_of[row.topic], key, value, [(EVENT_ID, event_id), *static])))
        except Exception:
            malformed[i] = _malformed(row, topic_of)
            append(_NO_RECORD)
            continue
        if size > limit:
            oversized[i] = size
    return records, oversized, malformed
