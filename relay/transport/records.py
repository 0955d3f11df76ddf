"""The outgoing record, whatever the transport, and how claimed rows become records: the
row's own bytes, its key, and headers (event_id, event_type and the row's headers). The
payload is never decoded.

This runs once per event, so it is one loop with no call per row beyond the encodes: the
event type and header set (a producer uses few) are encoded once and cached with their
size, which makes each record's exact size a few additions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

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


@functools.lru_cache(maxsize=1024)
def _headers(event_type: str, headers_json: str) -> tuple[Headers, int]:
    parsed = json.loads(headers_json)
    headers: Headers = (
        ("event_type", event_type.encode()),
        *((str(k), str(v).encode()) for k, v in parsed.items() if str(k).lower() not in _OWN),
    )
    return headers, sum(len(name) + len(value) for name, value in headers)


# tuple.__new__ builds the NamedTuple without its Python-level __new__.
_record = functools.partial(tuple.__new__, OutgoingRecord)


def to_records(
    rows: Sequence[ClaimedRow], topic_of: Mapping[str, str], limit: int
) -> tuple[list[OutgoingRecord], dict[int, int]]:
    """The rows' records, in order, and {index: size} of those larger than limit bytes
    (key, value and headers, as OutgoingRecord.size counts them)."""
    records: list[OutgoingRecord] = []
    append = records.append
    oversized: dict[int, int] = {}
    for i, row in enumerate(rows):
        static, static_size = _headers(row.event_type, row.headers_json)
        key, value, event_id = row.key.encode(), row.payload, row.event_id.encode()
        size = len(key) + len(value) + static_size + len(EVENT_ID) + len(event_id)
        if size > limit:
            oversized[i] = size
        append(_record((topic_of[row.topic], key, value, [(EVENT_ID, event_id), *static])))
    return records, oversized
