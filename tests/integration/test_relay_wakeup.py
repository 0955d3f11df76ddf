"""The wake-up path on real Postgres and SQLite and real Kafka: the cycle's empty claim is
the probe. An idle relay slows to probe_idle_interval_s and still finds a committed event
within it; rows held back behind a parked row of their key are not claimed and do not keep
the relay at its fast pace."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from relay.pipeline.loop import Lane
from relay.pipeline.step import BatchOutcome
from relay.service import RelayService
from relay.store import Failure
from relay.transport.memory import MemoryPublisher
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import claim, emit, event, keys_on_shard, opened_store, settle
from tests.support.waits import until

pytestmark = pytest.mark.integration

SHARD = 3
IDLE_INTERVAL_S = 0.25
PACE = {"probe_idle_interval_s": IDLE_INTERVAL_S, "probe_idle_after_s": 0.3}


def lane_of(relay: RelayService) -> Lane:
    (lane,) = relay.pipeline.lanes
    return lane


async def idle_pace(lane: Lane) -> None:
    """Until the lane has slowed to the idle pace (after probe_idle_after_s of nothing)."""
    await until(lambda: lane.pace_s == IDLE_INTERVAL_S, 30, "the idle pace", interval=0.02)


def published(relay: RelayService, count: int) -> Callable[[], bool]:
    return lambda: relay.stats.published >= count


async def test_an_idle_relay_slows_down_yet_finds_a_committed_event_at_once(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("wakeup")
    cycles: list[BatchOutcome] = []
    settings = relay_settings(backend, kafka_bootstrap, **PACE)
    async with running_relay(settings, on_batch=cycles.append) as relay:
        lane = lane_of(relay)
        for n in range(3):
            await idle_pace(lane)  # quiet: the relay probes every IDLE_INTERVAL_S
            (key,) = keys_on_shard(n, 1, prefix=f"w{n}")
            seen = len(cycles)
            emit(backend, event(key, topic=topic))
            # The cycle that published it reports after its settle has committed.
            await until(published(relay, n + 1), 30, f"event {n} published")
            await wait_drained(backend, timeout=30)
            # Found by the next idle-paced cycle (the one in flight may have claimed
            # before the commit), not by a slow poll of one shard.
            claims = [c.claimed for c in cycles[seen:]]
            assert 1 in claims[:2], claims
        assert relay.stats.published == 3
        assert all(c.claimed <= 1 for c in cycles)


async def test_rows_held_back_behind_a_parked_row_do_not_keep_the_relay_busy(
    backend: Backend,
) -> None:
    """A parked row holds its key's later row back: no cycle claims it, and the relay
    slows to its idle pace as if the table were empty; another key of the shard flows."""
    key, other = keys_on_shard(SHARD, 2)
    emit(backend, event(key))
    async with opened_store(backend) as store:
        token = await store.lease_acquire(SHARD, "parker", 30)
        assert token is not None
        (first,) = await claim(store, [SHARD], 10, "block_key")
        await settle(
            store, "parker", {SHARD: token}, [], [Failure(first.id, "x", 0.0, True)], False
        )
        await store.lease_release(SHARD, "parker", token)
    emit(backend, event(key))  # held back behind the parked row
    cycles: list[BatchOutcome] = []
    settings = relay_settings(backend, "127.0.0.1:9092", **PACE)
    publisher = MemoryPublisher()
    async with running_relay(settings, publisher=publisher, on_batch=cycles.append) as relay:
        await idle_pace(lane_of(relay))
        assert all(c.claimed == 0 for c in cycles)
        emit(backend, event(other))
        await until(lambda: relay.stats.published, 30, "the other key published")
        assert relay.stats.published == 1
