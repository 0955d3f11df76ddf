"""Operating a consumer: its Prometheus metrics (a registry per Consumer) and its ops
endpoint (/metrics, /healthz, /readyz) when ConsumerSettings.http_port is set.

Records are put on a private topic the way the relay publishes them, plus copies (a relay
publishing a row twice) and one record that cannot be decoded (dead-lettered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.errors import KafkaError

from consumer_lib import (
    ConsumedEvent,
    Consumer,
    ConsumerApp,
    ConsumerSettings,
    PsycopgAsync,
)
from outbox_core.kafka_security import KafkaSecurity
from tests.conftest import TopicFactory
from tests.support.consumers import (
    Outgoing,
    consumer_topics,
    make_events,
    produce,
    running_consumer,
    with_duplicates,
)
from tests.support.db import Backend
from tests.support.ops import Metrics, http_get, ops_port, scrape
from tests.support.waits import until

pytestmark = pytest.mark.integration


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[TopicFactory]:
    async with consumer_topics(kafka_bootstrap) as make:
        yield make


@pytest.mark.parametrize("batch", [True, False], ids=["batches", "per-record"])
async def test_consumer_metrics_count_outcomes_and_lag_counts_what_is_not_applied(
    batch: bool, pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    topic = await topics("cops")
    events = make_events(20, keys=5, seed=7)
    poison = Outgoing(key="bad", value=b"{}", headers=(("event_id", b"not-a-uuid"),))
    records = [*with_duplicates(events, 5, seed=8), poison]  # 26 records on partition 0
    await produce(kafka_bootstrap, topic, records)

    release = asyncio.Event()
    handled: list[str] = []
    held_at: list[int] = []

    async def handler(event: ConsumedEvent, conn: Any) -> None:
        handled.append(str(event.event_id))
        if len(handled) == 2:  # the second event holds up the partition
            held_at.append(event.offset)
            await release.wait()

    settings = ConsumerSettings(
        security=KafkaSecurity.plaintext(),
        bootstrap_servers=kafka_bootstrap,
        group_id=f"g-{topic}",
        http_port=0,
        lag_interval_s=0.1,
        backoff_base_s=0.01,
        batch=batch,
    )
    app = ConsumerApp(settings, PsycopgAsync(pg.target))
    app.handler(topic)(handler)
    async with running_consumer(app) as running:
        port = await ops_port(running.consumer)

        async def held_up() -> Metrics | None:
            m = await scrape(port)
            lag = m.value("outbox_consumer_lag", topic=topic, partition="0")
            return m if held_at and lag == len(records) - applied_before_hold() else None

        def applied_before_hold() -> int:
            # In a batch with the held record, the records before it are not applied either.
            return 0 if batch else held_at[0]

        # Everything was fetched, but only the records before the held one (per record) or
        # before its batch are applied: the rest are lag.
        blocked = await until(held_up, 60, "the lag while the handler is held up")
        healthz = await http_get(port, "/healthz")
        readyz = await http_get(port, "/readyz")
        await asyncio.sleep(0.3)
        release.set()

        async def done() -> Metrics | None:
            m = await scrape(port)
            finished = (
                m.value("outbox_consumer_dead_lettered_total", topic=topic) == 1
                and m.value("outbox_consumer_lag", topic=topic, partition="0") == 0
            )
            return m if finished else None

        m = await until(done, 60, "every record done", alive=running.check_alive)

    # No row of the counter yet (None) until the topic's first event is applied.
    assert blocked.value("outbox_consumer_events_processed_total", topic=topic) == (
        None if batch else 1
    )
    assert blocked.value("outbox_consumer_partitions_assigned") == 1
    assert (healthz.status, healthz.body) == (200, "ok\n")
    assert (readyz.status, readyz.body) == (200, "ok: 1 partition(s) assigned\n")
    assert m.value("outbox_consumer_events_processed_total", topic=topic) == 20
    assert m.value("outbox_consumer_duplicates_skipped_total", topic=topic) == 5
    assert m.value("outbox_consumer_handler_seconds_count", topic=topic) == 20
    # The held-up transaction took at least as long as the hold; the histogram saw it.
    assert m.value("outbox_consumer_handler_seconds_bucket", topic=topic, le="+Inf") == 20
    held = m.value("outbox_consumer_handler_seconds_sum", topic=topic)
    assert held is not None
    # At least the 0.3 s the test held it, less what asyncio's timer may wake early (its
    # clock's resolution): 0.2991 s was seen.
    assert held >= 0.29
    assert running.stats.processed == 20
    assert len(handled) == 20


async def never_called(event: object, conn: object) -> None:
    raise AssertionError("no record is consumed in this test")


async def test_consumer_readyz_names_kafka_until_it_is_reachable(
    pg: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ConsumerSettings(
        security=KafkaSecurity.plaintext(),
        bootstrap_servers="127.0.0.1:1",
        group_id="g-unreachable",
        http_port=0,
    )
    app = ConsumerApp(settings, PsycopgAsync(pg.target))
    app.handler("never")(never_called)
    consumer = Consumer(app)
    task = asyncio.create_task(consumer.run())
    try:
        port = await ops_port(consumer)
        readyz = await http_get(port, "/readyz")
        healthz = await http_get(port, "/healthz")
        missing = await http_get(port, "/nope")
    finally:
        consumer.stop()
        with contextlib.suppress(KafkaError, OSError):
            await asyncio.wait_for(task, 30)
    assert readyz.status == 503
    assert "kafka: unreachable" in readyz.body
    assert healthz.status == 200
    assert missing.status == 404
    with pytest.raises(ConnectionRefusedError):  # the endpoint went away with the consumer
        await http_get(port, "/healthz")
    # Each retry is one line, with the error's text.
    retries = [r for r in caplog.records if r.getMessage() == "kafka start failed; retrying"]
    assert retries, caplog.text
    assert "KafkaConnectionError" in retries[0].__dict__["error"]
