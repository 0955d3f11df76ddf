"""The Kafka publisher while its broker is away, against the real broker (serial: the test
stops the shared one).

aiokafka's own stop waits until every batch its producer holds is delivered, and while the
broker is away that wait has no end. The relay stops a producer to replace it after a fatal
error and when it is told to stop: either would wait out the outage, logging nothing. The
publisher's stop drops what its producer has not sent (the rows stay pending, and the next
producer sends them), and nothing of the stopped producer reaches the broker later.
"""

from __future__ import annotations

import asyncio

import pytest

from relay.transport.errors import PublishFailed
from relay.transport.kafka import KafkaPublisher
from relay.transport.records import OutgoingRecord
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.faults import service_down
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings
from tests.support.services import managed_services

pytestmark = pytest.mark.integration

# Without the broker, a publish call's batches go without acks after three request timeouts.
REQUEST_TIMEOUT_MS = 2_000
STOP_BOUND_S = 30


def records(topic: str, first: int, count: int) -> list[OutgoingRecord]:
    return [
        OutgoingRecord(topic, f"k{n % 7}".encode(), str(n).encode(), [])
        for n in range(first, count)
    ]


@pytest.mark.serial
async def test_a_publisher_stops_at_once_while_the_broker_is_away_and_sends_nothing_after(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    if not managed_services():
        pytest.skip("stops the broker: scripts/test runs it with the servers it manages")
    topic = await new_topic("broker-away", partitions=3)
    settings = relay_settings(pg, kafka_bootstrap, kafka_request_timeout_ms=REQUEST_TIMEOUT_MS)
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        assert all(
            not isinstance(o, PublishFailed) for o in await publisher.publish(records(topic, 0, 1))
        )
        with service_down("kafka"):
            # Sent while the broker is away: no acks, the batches still in the producer.
            unsent = await publisher.publish(records(topic, 1, 11))
            assert all(isinstance(o, PublishFailed) for o in unsent), unsent
            try:
                async with asyncio.timeout(STOP_BOUND_S):
                    await publisher.stop()
            except TimeoutError:
                pytest.fail(f"the publisher's stop waited {STOP_BOUND_S}s for the broker")
        # The broker back: a new producer sends them; the stopped one sent nothing late.
        await publisher.start()
        assert all(
            not isinstance(o, PublishFailed) for o in await publisher.publish(records(topic, 1, 11))
        )
    finally:
        await publisher.stop()
    got = sorted(int(r.value or b"-1") for r in await read_topic(kafka_bootstrap, topic))
    assert got == list(range(11))
    # Dropping the batches broke none of aiokafka's bookkeeping: no callback of its raised.
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
