"""Stream entries as events: the entry the relay's RedisStreamPublisher writes read back
into the ConsumedEvent handlers receive, and the dead-letter entry made from one."""

from __future__ import annotations

from dataclasses import dataclass

from consumer_lib.errors import dead_letter_reason
from consumer_lib.event import ConsumedEvent, decode

HEADER_FIELD = b"h:"  # as relay.transport.redis_streams writes them (the libraries share no code)


@dataclass(frozen=True)
class EntryRecord:
    """An entry in the shape the apply policy reads (a Kafka record's, a SourceRecord);
    partition and offset are -1: a stream has neither. It keeps the entry itself for the
    dead-letter stream and the XACK."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int
    offset: int
    timestamp: int
    stream: str
    entry_id: bytes
    fields: dict[bytes, bytes]


def entry_millis(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


def entry_record(
    topic: str, stream: str, entry_id: bytes, fields: dict[bytes, bytes]
) -> EntryRecord:
    """The entry as a record of the topic; the entry id's time is its timestamp."""
    headers = []
    for name, value in fields.items():
        if name.startswith(HEADER_FIELD):
            headers.append((name[len(HEADER_FIELD) :].decode("utf-8", "replace"), value))
    return EntryRecord(
        topic=topic,
        key=fields.get(b"key"),
        value=fields.get(b"payload"),
        headers=headers,
        partition=-1,
        offset=-1,
        timestamp=entry_millis(entry_id),
        stream=stream,
        entry_id=entry_id,
        fields=fields,
    )


def decode_entry(topic: str, entry_id: bytes, fields: dict[bytes, bytes]) -> ConsumedEvent:
    """The entry's event; PoisonRecord when it cannot be decoded."""
    return decode(entry_record(topic, topic, entry_id, fields))


def dead_letter_fields(
    fields: dict[bytes, bytes], *, stream: str, entry_id: bytes, group: str, error: BaseException
) -> dict[bytes, bytes]:
    """The entry's own fields, then where it came from and why it could not be applied."""
    first = (str(error).splitlines() or [""])[0]
    return {
        **fields,
        b"dlt.origin.stream": stream.encode(),
        b"dlt.origin.id": entry_id,
        b"dlt.group": group.encode(),
        b"dlt.reason": dead_letter_reason(error).encode(),
        b"dlt.error.type": type(error).__name__.encode(),
        b"dlt.error.message": first.encode()[:1000],
    }
