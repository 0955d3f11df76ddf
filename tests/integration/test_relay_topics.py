"""Topics Kafka cannot take, against the real broker (auto-create off, as scripts/services
configures it and as most production clusters run).

- A row for a topic that does not exist holds up no other topic: its lookup runs beside
  the cycle, its row backs off and is parked after max_attempts like any failing row, and
  the log and outbox_relay_topic_unavailable_total name the topic.
- A batch of several records the broker refuses for its size (the topic's limit lowered
  after the relay read it) is split before anything is charged; only the record too large
  alone is parked.
- A row naming a topic no Kafka could have is parked at once (hostile input).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from relay.ops.observer import RelayObserver
from relay.pipeline.step import BatchOutcome, Step
from relay.transport.kafka import KafkaPublisher
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import read_topic, unique_topic_name
from tests.support.relay import relay_settings
from tests.support.stores import emit, event, keys_on_shard, opened_store, row_states

pytestmark = pytest.mark.integration

SHARD = 2


async def topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def steps_until(
    step: Step, token: int, observer: RelayObserver, done: Any, limit: int = 60
) -> list[BatchOutcome]:
    outcomes = []
    for _ in range(limit):
        outcome = await step.run({SHARD: token})
        observer.batch(outcome)
        outcomes.append(outcome)
        if done():
            return outcomes
        await asyncio.sleep(0.05)  # the rows' backoff runs out
    raise AssertionError(f"not done after {limit} steps: {outcomes[-3:]}")


async def test_a_missing_topic_holds_up_no_other_topic_and_is_parked_naming_it(
    backend: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    orders, payments = await new_topic("orders"), await new_topic("payments")
    missing = unique_topic_name("missing")
    keys = keys_on_shard(SHARD, 6)
    ids = emit(
        backend,
        event(keys[0], topic=missing, payload={"n": -1}),
        *(event(k, topic=(orders, payments)[n % 2], payload={"n": n}) for n, k in enumerate(keys)),
    )
    lost = ids[0]
    # The relay's default request timeout: aiokafka's own metadata wait for a missing topic
    # lasts this long, and the cycle used to wait it out before sending anything.
    settings = relay_settings(
        backend,
        kafka_bootstrap,
        max_attempts=3,
        backoff_base_s=0.05,
        backoff_max_s=0.1,
        kafka_request_timeout_ms=30_000,
    )
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    observer = RelayObserver()
    await publisher.start()
    caplog.set_level(logging.WARNING, logger="relay.topics")
    try:
        async with opened_store(backend) as store:
            token = await store.lease_acquire(SHARD, settings.leases.replica_id, 30)
            assert token is not None
            step = Step(settings.batch_rules(), store=store, publisher=publisher)

            def others_out() -> bool:
                return all(s.published for i, s in row_states(backend).items() if i != lost)

            # Every other row is out well inside one metadata wait for the missing topic.
            await asyncio.wait_for(steps_until(step, token, observer, others_out), 15)
            assert not row_states(backend)[lost].published

            def parked() -> bool:
                return row_states(backend)[lost].status == "parked"

            await asyncio.wait_for(steps_until(step, token, observer, parked), 30)
    finally:
        await publisher.stop()
    state = row_states(backend)[lost]
    assert (state.attempts, state.status) == (3, "parked")
    assert missing in (state.last_error or "")
    assert [r for r in caplog.records if getattr(r, "topic", None) == missing]
    registry = observer.metrics.registry
    unavailable = registry.get_sample_value(
        "outbox_relay_topic_unavailable_total", {"topic": missing}
    )
    assert unavailable == 3
    assert missing not in await topic_names(kafka_bootstrap)  # auto-create is off
    got = [
        json.loads(r.value or b"{}")["n"]
        for t in (orders, payments)
        for r in await read_topic(kafka_bootstrap, t)
    ]
    assert sorted(got) == list(range(len(keys)))


async def test_a_batch_refused_for_its_size_is_split_and_only_a_record_too_large_alone_parks(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("shrinking", configs={"max.message.bytes": "1000000"})
    settings = relay_settings(backend, kafka_bootstrap, backoff_base_s=0.05, backoff_max_s=0.1)
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    keys = keys_on_shard(SHARD, 13)
    try:
        async with opened_store(backend) as store:
            token = await store.lease_acquire(SHARD, settings.leases.replica_id, 30)
            assert token is not None
            step = Step(settings.batch_rules(), store=store, publisher=publisher)
            emit(backend, event(keys[0], topic=topic, payload={"n": 0}))
            first = await step.run({SHARD: token})  # the relay reads the topic's limit: 1 MB
            assert first.published == 1
            # The limit is lowered behind the relay's back: its next batch is refused whole.
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            await admin.start()
            try:
                await admin.alter_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, topic, {"max.message.bytes": "4096"})]
                )
            finally:
                await admin.close()
            small = emit(
                backend,
                *(
                    event(k, topic=topic, payload={"n": n, "blob": "x" * 900})
                    for n, k in enumerate(keys[1:12], 1)
                ),
            )
            (big,) = emit(
                backend, event(keys[12], topic=topic, payload={"n": 99, "blob": "y" * 6000})
            )
            refusals = 0
            for _ in range(40):
                outcome = await step.run({SHARD: token})
                if outcome.fatal_producer_error:
                    refusals += 1
                    await publisher.recreate()  # as the lane does after a fatal error
                states = row_states(backend)
                if all(states[i].published for i in small) and states[big].status == "parked":
                    break
                await asyncio.sleep(0.05)
    finally:
        await publisher.stop()
    states = row_states(backend)
    assert all(states[i].published and states[i].attempts == 0 for i in small)  # never charged
    assert (states[big].status, states[big].attempts) == ("parked", 1)
    assert "RecordTooLarge" in (states[big].last_error or "") or "too large" in (
        states[big].last_error or ""
    )
    assert refusals >= 1  # the broker did refuse a batch of several records
    got = sorted(
        json.loads(r.value or b"{}")["n"] for r in await read_topic(kafka_bootstrap, topic)
    )
    assert got == list(range(12))


async def test_a_row_naming_an_impossible_topic_is_parked_at_once(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    fine = await new_topic("fine")
    bad, good = keys_on_shard(SHARD, 2)
    hostile, ok = emit(
        backend,
        event(bad, topic=fine, payload={"n": 0}),
        event(good, topic=fine, payload={"n": 1}),
    )
    backend.execute("outbox_set_topic", {"id": hostile, "topic": "no spaces/or slashes allowed"})
    settings = relay_settings(backend, kafka_bootstrap)
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        async with opened_store(backend) as store:
            token = await store.lease_acquire(SHARD, settings.leases.replica_id, 30)
            assert token is not None
            step = Step(settings.batch_rules(), store=store, publisher=publisher)
            outcome = await step.run({SHARD: token})
    finally:
        await publisher.stop()
    assert (outcome.published, outcome.parked) == (1, 1)
    states = row_states(backend)
    assert states[ok].published
    assert (states[hostile].status, states[hostile].attempts) == ("parked", 1)
    assert "not a legal Kafka topic name" in (states[hostile].last_error or "")
