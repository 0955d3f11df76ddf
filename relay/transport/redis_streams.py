"""Publishing to Redis Streams: the second transport behind the same Publisher protocol.

Each record is one stream entry (XADD with an id Redis assigns) on the stream named as a
Kafka topic would be (topic_prefix, topic_map); see consumer_lib.redis_source for the
reader. An entry's fields: event_id, event_type, key, payload, and every header as a field
`h:<name>` (binary safe, so nothing is re-encoded).

Per-key order: a claim's XADDs go out in id order in one MULTI/EXEC pipeline, answered as
a whole before the settle, so a key's later entry cannot be stored ahead of an earlier
one. A failure inside the transaction (a stream key holding another type) hits every entry
of that stream alike; each entry's own reply is reported.

Trimming is never automatic: MAXLEN or MINID only when configured (redis_stream_maxlen,
redis_stream_max_age_s), because trimming removes entries whether or not a lagging group
has read them (consumer_lib reports such entries as lost).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, model_validator

from outbox_core import redis_connection
from outbox_core.redis_connection import RedisSettings, connect
from outbox_core.settings import SettingsGroup
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.protocol import ACKED, Outcome
from relay.transport.records import OutgoingRecord

if TYPE_CHECKING:
    from redis.asyncio import Redis

HEADER_FIELD = b"h:"


class RedisStreamSettings(SettingsGroup):
    """How the relay writes streams (OUTBOX_REDIS_STREAM_*); the connection is OUTBOX_REDIS_*."""

    env_infix: ClassVar[str] = "redis_stream_"

    maxlen: int | None = Field(
        default=None,
        ge=1,
        description="Trim each stream to about this many entries on every append (XADD MAXLEN ~). "
        "Off by default: trimming drops entries a lagging consumer group has not read yet.",
    )
    max_age_s: float | None = Field(
        default=None,
        gt=0,
        description="Trim entries older than this many seconds on every append (XADD MINID ~). "
        "Off by default, for the same reason as redis_stream_maxlen.",
    )

    @model_validator(mode="after")
    def _one_trim(self) -> RedisStreamSettings:
        if self.maxlen is not None and self.max_age_s is not None:
            raise ValueError("set redis_stream_maxlen or redis_stream_max_age_s, not both")
        return self


def entry_fields(record: OutgoingRecord) -> dict[bytes, bytes]:
    """The stream entry of one record (consumer_lib.redis_source reads it back)."""
    headers = {name: value for name, value in record.headers}
    fields = {
        b"event_id": headers.get("event_id", b""),
        b"event_type": headers.get("event_type", b""),
        b"key": record.key,
        b"payload": record.value,
    }
    for name, value in record.headers:
        fields[HEADER_FIELD + name.encode()] = value
    return fields


class RedisStreamPublisher:
    def __init__(self, settings: RedisSettings, stream: RedisStreamSettings) -> None:
        self._settings = settings
        self._stream = stream
        self._client: Redis | None = None

    async def start(self) -> None:
        client = connect(self._settings)
        try:
            await client.ping()
        except Exception as exc:
            await client.aclose()
            raise classify(exc) from exc
        self._client = client

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def recreate(self) -> None:
        await self.stop()
        await self.start()

    def _trim(self) -> dict[str, Any]:
        if self._stream.maxlen is not None:
            return {"maxlen": self._stream.maxlen, "approximate": True}
        if self._stream.max_age_s is not None:
            oldest_ms = int((time.time() - self._stream.max_age_s) * 1000)
            return {"minid": f"{oldest_ms}-0", "approximate": True}
        return {}

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        client = self._client
        if client is None:
            raise PublishFailed(FailureReason.PRODUCER_BROKEN, "redis client is not started")
        if not records:
            return []
        pipe: Any = client.pipeline(transaction=True)
        trim = self._trim()
        for record in records:
            pipe.xadd(record.topic, entry_fields(record), **trim)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            return [classify(exc)] * len(records)
        finally:
            await pipe.reset()
        return [classify(r) if isinstance(r, Exception) else ACKED for r in replies]


def classify(exc: BaseException) -> PublishFailed:
    """A redis-py error as the relay's PublishFailed: the connection or the server failing
    is the transport's (retried, never charged), anything else refused the entry."""
    failure = redis_connection.classify(exc)
    reason = FailureReason.UNREACHABLE if failure.retriable else FailureReason.REFUSED
    return PublishFailed(reason, str(failure))
