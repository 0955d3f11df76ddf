"""The wake-up path on real Postgres and SQLite and real Kafka: an idle relay (shards that
would otherwise wait 30 s between claims) is woken by the probe for a committed event, and
a shard woken for rows it cannot claim does not spin on them."""

from __future__ import annotations

import asyncio
import time

import pytest

from relay.batch import BatchOutcome
from relay.memory_publisher import MemoryPublisher
from relay.store import Failure
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import emit, event, keys_on_shard, opened_store

pytestmark = pytest.mark.integration

IDLE_S = 30.0
SHARD = 3


async def test_the_probe_wakes_an_idle_shard_for_a_committed_event(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("wakeup")
    settings = relay_settings(
        backend, kafka_bootstrap, idle_interval_s=IDLE_S, poll_interval_s=IDLE_S / 4
    )
    async with running_relay(settings) as relay:
        for n in range(3):
            await asyncio.sleep(1.0)  # every shard has claimed and is waiting
            (key,) = keys_on_shard(n, 1, prefix=f"w{n}")
            emit(backend, event(key, topic=topic))
            started = time.monotonic()
            await wait_drained(backend, timeout=IDLE_S / 3)
            # Woken, not found by the shard's 30-second claim.
            assert time.monotonic() - started < IDLE_S / 3
        assert relay.stats.published == 3
        assert relay.prober.probes > 0


async def test_a_shard_woken_for_rows_it_cannot_claim_is_not_woken_again_at_once(
    backend: Backend,
) -> None:
    """A parked row holds its key's later row back: the probe sees a ready row, the claim
    finds nothing. The shard is then left alone (poll_interval_s, doubling), instead of
    being claimed every probe_interval_s."""
    key, other = keys_on_shard(SHARD, 2)
    emit(backend, event(key))
    async with opened_store(backend) as store:
        token = await store.lease_acquire(SHARD, "parker", 30)
        assert token is not None
        (first,) = await store.claim(SHARD, 10, "block_key")
        await store.settle(SHARD, "parker", token, [], [Failure(first.id, "x", 0.0, True)], False)
        await store.lease_release(SHARD, "parker", token)
    emit(backend, event(key))  # held back behind the parked row, yet "ready" to the probe
    claims: list[BatchOutcome] = []
    settings = relay_settings(backend, "127.0.0.1:9092", idle_interval_s=1.0, poll_interval_s=0.05)
    publisher = MemoryPublisher()
    async with running_relay(settings, publisher=publisher, on_batch=claims.append) as relay:
        await asyncio.sleep(2.0)
        on_shard = [c for c in claims if c.shard == SHARD]
        # 2 s at one probe per 5 ms would be ~400 claims; quieted, it is a handful.
        assert 1 <= len(on_shard) <= 20, len(on_shard)
        assert all(c.claimed == 0 for c in on_shard)
        # Another key of the shard still flows: its row wakes the shard once quiet ends.
        emit(backend, event(other))
        for _ in range(100):
            if relay.stats.published:
                break
            await asyncio.sleep(0.05)
        assert relay.stats.published == 1
