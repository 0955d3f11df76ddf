"""Per-key order against real Kafka: batches as large as each topic allows, and a key's rows
of one claim never split over two record batches that Kafka could judge apart.

The topic takes record batches of at most 4 KiB (max.message.bytes), read from the broker
by the publisher. Key K has three rows of 1.5 KB: two fit one record batch, the third
would need a second one. The first record batch is refused (the failure is injected at
submission: a broker that refuses a batch refuses all of it), so K's first rows fail; K's
third row must not reach the topic before them: it is held for a later claim.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from relay.pipeline.step import Step
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import KafkaPublisher, _Acks, classify
from relay.transport.protocol import Outcome
from relay.transport.records import OutgoingRecord
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings
from tests.support.stores import emit, event, keys_on_shard, opened_store, row_states
from tests.support.waits import until

pytestmark = pytest.mark.integration

SHARD = 3
LIMIT = 4096


class FirstBatchRefused(KafkaPublisher):
    """The real publisher, whose first record batch the 'broker' refuses whole."""

    refused = 0

    async def _submit(
        self,
        producer: Any,
        builder: Any,
        topic: str,
        partition: int,
        members: list[int],
        results: list[Outcome],
        acks: _Acks,
        built_from: Sequence[tuple[int, OutgoingRecord]] = (),
    ) -> PublishFailed | None:
        if self.refused:
            return await super()._submit(
                producer, builder, topic, partition, members, results, acks, built_from
            )
        self.refused += 1
        refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        refused.set_exception(
            PublishFailed(FailureReason.TOPIC_UNAVAILABLE, "NotEnoughReplicas: injected")
        )
        acks.add(refused, members, classify)
        return None


async def test_a_key_spanning_record_batches_waits_for_its_earlier_rows(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("keybatches", configs={"max.message.bytes": str(LIMIT)})
    k, j = keys_on_shard(SHARD, 2)
    blob = "x" * 1500
    k1, _k2, _j1, k3 = emit(
        backend,
        event(k, topic=topic, payload={"n": 1, "blob": blob}),
        event(k, topic=topic, payload={"n": 2, "blob": blob}),
        event(j, topic=topic, payload={"n": 3}),
        event(k, topic=topic, payload={"n": 4, "blob": blob}),
    )
    settings = relay_settings(backend, kafka_bootstrap, backoff_base_s=0.05, backoff_max_s=0.1)
    publisher = FirstBatchRefused(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        # The topic's limit read before the first claim: a cycle waits only briefly for
        # it, and without it the rows would go in one batch of the fallback size.
        await until(
            lambda: publisher._limits.limit(topic) == LIMIT, 30, "the topic's batch limit read"
        )
        async with opened_store(backend) as store:
            token = await store.lease_acquire(SHARD, settings.leases.replica_id, 30)
            assert token is not None
            rules = settings.batch_rules()

            async def step() -> Any:
                return await Step(rules, store=store, publisher=publisher).run({SHARD: token})

            first = await step()
            # K1, K2 and J1 went in the refused batch; K3 would have needed another one.
            assert (first.claimed, first.published, first.retried, first.held_back) == (
                4,
                0,
                3,
                1,
            )
            states = row_states(backend)
            assert (states[k3].attempts, states[k1].attempts) == (0, 1)
            for _ in range(20):
                await asyncio.sleep(0.15)  # their backoff runs out
                await step()
                if all(s.published for s in row_states(backend).values()):
                    break
    finally:
        await publisher.stop()
    assert all(s.published for s in row_states(backend).values())
    records = await read_topic(kafka_bootstrap, topic)
    order = [json.loads(r.value or b"{}")["n"] for r in records]
    assert sorted(order) == [1, 2, 3, 4]  # each once: the refused batch never reached Kafka
    on_k = [n for n in order if n != 3]
    assert on_k == [1, 2, 4]
