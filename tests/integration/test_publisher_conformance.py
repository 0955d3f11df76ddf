"""The Publisher protocol's contract, one scenario run against every implementation: the
in-memory double, Kafka and Redis Streams (real servers). Transport-specific behaviour
(Redis trimming, a refused stream) follows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import pytest
from redis.asyncio import Redis

from outbox_core.kafka_security import KafkaSecurity
from outbox_core.redis_connection import RedisSettings
from relay.transport.errors import PublishFailed
from relay.transport.kafka import KafkaPublisher
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.memory import MemoryPublisher
from relay.transport.protocol import ACKED, Outcome, Publisher
from relay.transport.records import OutgoingRecord
from relay.transport.redis_streams import RedisStreamPublisher, RedisStreamSettings
from tests.conftest import TopicFactory
from tests.support import kafka as kafka_support
from tests.support.redis import unique_stream_name

# Each call's outcomes are checked: a new topic's lookup must not hold its records back.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("patient_kafka_lookups")]

Stored = tuple[bytes, bytes, dict[str, bytes]]  # key, value, headers


@dataclass
class Transport:
    publisher: Publisher
    new_topic: Callable[[], Awaitable[str]]
    read: Callable[[str], Awaitable[list[Stored]]]


def _kafka(request: pytest.FixtureRequest) -> Transport:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    new_topic = cast(TopicFactory, request.getfixturevalue("new_topic"))

    async def read(topic: str) -> list[Stored]:
        records = await kafka_support.read_topic(bootstrap, topic)
        return [(r.key or b"", r.value or b"", dict(r.headers)) for r in records]

    settings = KafkaSettings(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    return Transport(KafkaPublisher(settings, KafkaSecurity.plaintext()), new_topic, read)


def _redis(request: pytest.FixtureRequest) -> Transport:
    client = cast(Redis, request.getfixturevalue("redis_client"))

    async def new_topic() -> str:
        return unique_stream_name("conf")

    async def read(stream: str) -> list[Stored]:
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await client.xrange(stream))
        return [_stored(fields) for _, fields in entries]

    url = request.getfixturevalue("redis_url")
    return Transport(
        RedisStreamPublisher(RedisSettings(url=url), RedisStreamSettings()), new_topic, read
    )


def _memory(request: pytest.FixtureRequest) -> Transport:
    publisher = MemoryPublisher()

    async def new_topic() -> str:
        return unique_stream_name("mem")

    async def read(topic: str) -> list[Stored]:
        return [(r.key, r.value, dict(r.headers)) for r in publisher.sent if r.topic == topic]

    return Transport(publisher, new_topic, read)


def _stored(fields: dict[bytes, bytes]) -> Stored:
    headers = {k[2:].decode(): v for k, v in fields.items() if k.startswith(b"h:")}
    return fields[b"key"], fields[b"payload"], headers


def _by_key(stored: list[Stored]) -> dict[bytes, list[Stored]]:
    out: dict[bytes, list[Stored]] = {}
    for item in stored:
        out.setdefault(item[0], []).append(item)
    return out


MAKERS = {"memory": _memory, "kafka": _kafka, "redis": _redis}


@pytest.fixture(params=sorted(MAKERS))
def made(request: pytest.FixtureRequest) -> Transport:
    return MAKERS[request.param](request)


@pytest.fixture
async def transport(made: Transport) -> AsyncIterator[Transport]:
    await made.publisher.start()
    yield made
    await made.publisher.stop()


def _records(topic: str, keys: list[bytes]) -> list[OutgoingRecord]:
    return [
        OutgoingRecord(
            topic,
            key,
            f'{{"n": {i}}}'.encode(),
            [("event_id", f"00000000-0000-0000-0000-{i:012d}".encode()), ("event_type", b"T")],
        )
        for i, key in enumerate(keys)
    ]


def _acks(results: list[Outcome]) -> None:
    assert not any(isinstance(r, PublishFailed) for r in results)
    assert results == [ACKED] * len(results)


async def test_acked_records_are_stored_in_order_with_key_value_and_headers(
    transport: Transport,
) -> None:
    topic = await transport.new_topic()
    records = _records(topic, [b"a", b"b", b"a", b"c", b"a", b"b"])
    results = await transport.publisher.publish(records)
    assert len(results) == len(records)
    _acks(results)
    # The contract is per key: across keys, acks may land in any order.
    stored = await transport.read(topic)
    assert _by_key(stored) == _by_key([(r.key, r.value, dict(r.headers)) for r in records])


async def test_successive_calls_keep_each_keys_order(transport: Transport) -> None:
    topic = await transport.new_topic()
    first = _records(topic, [b"k"] * 3)
    second = [r._replace(value=r.value + b" ") for r in _records(topic, [b"k"] * 3)]
    _acks(await transport.publisher.publish(first))
    _acks(await transport.publisher.publish(second))
    assert [v for _, v, _ in await transport.read(topic)] == [r.value for r in first + second]


async def test_recreate_leaves_a_working_publisher(transport: Transport) -> None:
    topic = await transport.new_topic()
    await transport.publisher.recreate()
    _acks(await transport.publisher.publish(_records(topic, [b"x"])))
    assert len(await transport.read(topic)) == 1


async def test_an_empty_call_hands_nothing_over(transport: Transport) -> None:
    assert await transport.publisher.publish([]) == []
