"""The project's Kafka clients stopped while their broker is away, against the real
broker (serial: the tests stop the shared one); outbox_core.kafka_clients says what goes
wrong in aiokafka's own stops then.

- The relay's publisher and a consumer's dead letters stop at once, dropping what their
  producer has not sent: the relay's rows stay pending and the next producer sends them; a
  dead letter's record is not committed, so it comes back. Nothing of a stopped producer
  reaches the broker later.
- A consumer stops cleanly: no stray cancellation comes out of its Kafka client's stop,
  and its clean-up runs to its end.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord
from sqlalchemy import create_engine

from consumer_lib import ConsumerApp, SqlAlchemySync
from consumer_lib.dead_letters import DeadLetters
from consumer_lib.observer import ConsumerObserver
from outbox_core.supervisor import Supervisor
from relay.transport.errors import PublishFailed
from relay.transport.kafka import KafkaPublisher
from relay.transport.records import OutgoingRecord
from tests.conftest import TopicFactory
from tests.support.consumers import fast_settings, new_group, prepare, running_consumer
from tests.support.db import Backend, sqlite_backend
from tests.support.faults import service_down
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings
from tests.support.services import managed_services
from tests.support.waits import until

pytestmark = pytest.mark.integration

# Without the broker, a publish call's batches go without acks after three request timeouts.
REQUEST_TIMEOUT_MS = 2_000
STOP_BOUND_S = 30


def require_managed_services() -> None:
    if not managed_services():
        pytest.skip("stops the broker: scripts/test runs it with the servers it manages")


def callback_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio logged: an exception raised in a callback (aiokafka's bookkeeping)."""
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def records(topic: str, first: int, end: int) -> list[OutgoingRecord]:
    """Records first..end-1 on seven keys, each record's value its number."""
    return [
        OutgoingRecord(topic, f"k{n % 7}".encode(), str(n).encode(), []) for n in range(first, end)
    ]


@pytest.mark.serial
async def test_a_publisher_stops_at_once_while_the_broker_is_away_and_sends_nothing_after(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    require_managed_services()
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
    assert callback_errors(caplog) == []


def still(task: asyncio.Task[None]) -> None:
    if task.done():
        raise AssertionError(f"the dead letter's send ended while the broker is away: {task!r}")


def source_record(topic: str, offset: int) -> ConsumerRecord[bytes, bytes]:
    value = str(offset).encode()
    return ConsumerRecord(topic, 0, offset, 0, 0, b"k", value, None, len(value), 1, [])


@pytest.mark.serial
async def test_a_consumer_s_dead_letters_stop_at_once_while_the_broker_is_away(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead letter on its way when the consumer is told to stop: the consumer cancels the
    send (its record stays uncommitted), then stops the producer, which holds the batch."""
    require_managed_services()
    topic = await new_topic("dead-letters-away")
    settings = fast_settings(kafka_bootstrap, new_group())
    database = SqlAlchemySync(create_engine(f"sqlite:///{tmp_path / 'consumer.sqlite3'}"))
    dead_letters = DeadLetters(
        settings,
        [topic],
        supervisor=Supervisor(logging.getLogger("test.dead_letters")),
        observer=ConsumerObserver(),
        database=database,
        transient=lambda exc: False,
    )
    await dead_letters.start()  # creates the dead-letter topic
    try:
        await dead_letters.send(source_record(topic, 0), RuntimeError("handler failed"))
        with service_down("kafka"):
            sending = asyncio.create_task(
                dead_letters.send(source_record(topic, 1), RuntimeError("handler failed"))
            )
            await until(
                lambda: "Got error produce response" in caplog.text,
                STOP_BOUND_S,
                "the dead letter sent to the broker that is away",
                alive=lambda: still(sending),
            )
            sending.cancel()  # what the consumer's shutdown does to it
            await asyncio.wait({sending})
            try:
                async with asyncio.timeout(STOP_BOUND_S):
                    await dead_letters.stop()
            except TimeoutError:
                pytest.fail(f"the dead-letter producer's stop waited {STOP_BOUND_S}s")
    finally:
        await dead_letters.stop()  # again after a failure: a stopped producer returns
        await database.close()
    got = [
        r.value for r in await read_topic(kafka_bootstrap, settings.dead_letter_topic_for(topic))
    ]
    assert got == [b"0"]  # the stopped producer sent nothing once the broker was back
    assert callback_errors(caplog) == []


@pytest.mark.serial
async def test_a_consumer_told_to_stop_while_the_broker_is_away_stops_cleanly(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka's consumer stop let a fetch task's cancellation out while that task waited
    out its retry backoff: the consumer's run ended as cancelled, its database and
    dead-letter producer never closed."""
    require_managed_services()
    caplog.set_level(logging.INFO, logger="consumer_lib")
    topic = await new_topic("consumer-away")
    backend = prepare(sqlite_backend(tmp_path / "consumer.sqlite3"))
    database = SqlAlchemySync(create_engine(backend.sqlalchemy_url))
    app = ConsumerApp(fast_settings(kafka_bootstrap, new_group()), database)
    app.handler(topic, "OrderPlaced")(lambda event, session: None)
    async with running_consumer(app) as running:
        await until(
            lambda: "partitions assigned" in caplog.text,
            60,
            "partitions assigned",
            alive=running.check_alive,
        )
        with service_down("kafka"):
            await until(
                lambda: "Failed fetch messages" in caplog.text,
                STOP_BOUND_S,
                "the consumer's fetches failing",
                alive=running.check_alive,
            )
            running.consumer.stop()
            assert running.task is not None
            done, _ = await asyncio.wait({running.task}, timeout=STOP_BOUND_S)
            assert done, f"the consumer did not stop within {STOP_BOUND_S}s"
            assert running.task.exception() is None  # raises if it ended cancelled
    assert "consumer stopped" in caplog.text  # its clean-up ran to the end
