"""What only the Redis Streams publisher does: trimming only when configured, a refused
stream failing its own records, an unreachable server as the transport's retriable error."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from outbox_core.redis_connection import RedisSettings
from relay.transport.errors import PublishFailed
from relay.transport.protocol import ACKED
from relay.transport.records import OutgoingRecord
from relay.transport.redis_streams import RedisStreamPublisher, RedisStreamSettings
from tests.support.redis import unique_stream_name

pytestmark = pytest.mark.integration


def _records(stream: str, n: int, key: bytes = b"k") -> list[OutgoingRecord]:
    return [OutgoingRecord(stream, key, str(i).encode(), [("event_id", b"e")]) for i in range(n)]


async def _publish(publisher: RedisStreamPublisher, records: list[OutgoingRecord]) -> list[object]:
    """Per record: None when stored, else its PublishFailed."""
    return [None if o is ACKED else o for o in await publisher.publish(records)]


async def test_streams_are_never_trimmed_unless_configured(
    redis_url: str, redis_client: Redis
) -> None:
    stream = unique_stream_name()
    publisher = RedisStreamPublisher(RedisSettings(url=redis_url), RedisStreamSettings())
    await publisher.start()
    try:
        for _ in range(5):
            assert await _publish(publisher, _records(stream, 200)) == [None] * 200
    finally:
        await publisher.stop()
    assert await redis_client.xlen(stream) == 1000


async def test_maxlen_trims_when_configured(redis_url: str, redis_client: Redis) -> None:
    stream = unique_stream_name()
    publisher = RedisStreamPublisher(RedisSettings(url=redis_url), RedisStreamSettings(maxlen=100))
    await publisher.start()
    try:
        for _ in range(10):
            await _publish(publisher, _records(stream, 200))
    finally:
        await publisher.stop()
    # Approximate trimming (~) removes whole macro nodes: about, never far below, 100.
    assert 100 <= await redis_client.xlen(stream) < 2000


async def test_a_stream_key_of_another_type_fails_only_its_records(
    redis_url: str, redis_client: Redis
) -> None:
    bad, good = unique_stream_name("bad"), unique_stream_name("good")
    await redis_client.set(bad, "not a stream")
    publisher = RedisStreamPublisher(RedisSettings(url=redis_url), RedisStreamSettings())
    await publisher.start()
    try:
        outcome = await _publish(publisher, [*_records(bad, 2), *_records(good, 2, b"other")])
    finally:
        await publisher.stop()
    assert all(isinstance(o, PublishFailed) and not o.retriable for o in outcome[:2])
    assert outcome[2:] == [None, None]
    assert await redis_client.xlen(good) == 2


async def test_an_unreachable_server_is_a_retriable_transport_failure() -> None:
    publisher = RedisStreamPublisher(
        RedisSettings(url="redis://127.0.0.1:1/0", socket_timeout_s=1), RedisStreamSettings()
    )
    with pytest.raises(PublishFailed) as failed:
        await publisher.start()
    assert failed.value.retriable
    assert failed.value.transport


def test_maxlen_and_max_age_together_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        RedisStreamSettings(maxlen=10, max_age_s=60)
