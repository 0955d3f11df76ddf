"""From a claimed row to the record Kafka gets: the row's own bytes, its key, and headers
(event_id, event_type and the row's headers). The payload is never decoded."""

from __future__ import annotations

import functools
import json

from relay.publisher import OutgoingRecord
from relay.store import ClaimedRow


@functools.lru_cache(maxsize=1024)
def _headers(headers_json: str) -> tuple[tuple[str, bytes], ...]:
    # Rows of one producer usually carry the same few header sets: parse each once.
    parsed = json.loads(headers_json)
    return tuple((str(k), str(v).encode()) for k, v in parsed.items())


@functools.lru_cache(maxsize=1024)
def _type_header(event_type: str) -> tuple[str, bytes]:
    return ("event_type", event_type.encode())


def to_record(row: ClaimedRow, topic: str) -> OutgoingRecord:
    return OutgoingRecord(
        topic,
        row.key.encode(),
        row.payload,
        [
            ("event_id", row.event_id.encode()),
            _type_header(row.event_type),
            *_headers(row.headers_json),
        ],
    )


def too_large(record: OutgoingRecord, row: ClaimedRow, limit: int) -> bool:
    """Larger than the producer accepts. An upper bound first (a character is at most 4
    UTF-8 bytes; header names and values never exceed their JSON text; event_id and
    event_type add 54 bytes plus the type): only rows near the limit pay for the exact
    size."""
    bound = len(record.value) + len(record.key) + 4 * (len(row.headers_json) + len(row.event_type))
    return bound + 64 > limit and record.size > limit
