"""Stream entries as events: the entry the relay's RedisStreamPublisher writes read back
into the ConsumedEvent handlers receive, and the dead-letter entry made from one."""

from __future__ import annotations

from dataclasses import dataclass

from consumer_lib.event import ConsumedEvent, decode

HEADER_FIELD = b"h:"  # as relay.transport.redis_streams writes them (the libraries share no code)


@dataclass(frozen=True)
class _EntryRecord:
    """The shape consumer_lib.event.decode reads (a Kafka record's), filled from an entry."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int
    offset: int
    timestamp: int


def entry_millis(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


def decode_entry(topic: str, entry_id: bytes, fields: dict[bytes, bytes]) -> ConsumedEvent:
    """PoisonRecord when it cannot be decoded. partition and offset are -1: a stream has
    neither; the entry id's time is the event's timestamp."""
    headers = []
    for name, value in fields.items():
        if name.startswith(HEADER_FIELD):
            headers.append((name[len(HEADER_FIELD) :].decode("utf-8", "replace"), value))
    record = _EntryRecord(
        topic=topic,
        key=fields.get(b"key"),
        value=fields.get(b"payload"),
        headers=headers,
        partition=-1,
        offset=-1,
        timestamp=entry_millis(entry_id),
    )
    return decode(record)


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
        b"dlt.error.type": type(error).__name__.encode(),
        b"dlt.error.message": first.encode()[:1000],
    }
