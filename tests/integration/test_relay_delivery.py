"""The relay end to end on real Kafka: what commits arrives, in order per key; nothing else."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from producer_lib import Event, Outbox
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import (
    RelayProcess,
    expected_from_db,
    judge_topic,
    relay_env,
    relay_settings,
    running_relay,
    wait_drained,
)
from tests.support.transactions import sync_tx

pytestmark = pytest.mark.integration


def emit_orders(backend: Backend, topic: str, n: int, keys: int, seed: int = 0) -> list[str]:
    """n events over `keys` keys in transactions of 1-20 events; ~10% roll back.

    Returns the event_ids of the rolled-back events (which must never be published).
    """
    rng = random.Random(seed)
    outbox = Outbox()
    rolled_back: list[str] = []
    i = 0
    while i < n:
        size = min(rng.randint(1, 20), n - i)
        events = [
            Event(topic, f"key-{rng.randrange(keys)}", "OrderPlaced", {"i": i + j})
            for j in range(size)
        ]
        if rng.random() < 0.1:
            with pytest.raises(RuntimeError), sync_tx(backend, "driver") as conn:
                rolled_back += [str(e) for e in outbox.emit_batch(conn, events)]
                raise RuntimeError("rollback")
            continue
        with sync_tx(backend, "driver") as conn:
            outbox.emit_batch(conn, events)
        i += size
    return rolled_back


async def test_committed_events_arrive_in_order(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("orders", partitions=3)
    rolled_back = emit_orders(backend, topic, 2000, keys=50)
    expected = expected_from_db(backend)
    async with running_relay(relay_settings(backend, kafka_bootstrap, batch_size=200)) as relay:
        await wait_drained(backend)
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    all_ids = [e for ids in expected.values() for e in ids]
    assert len(all_ids) == 2000
    assert verdict.missing(all_ids) == set()
    assert verdict.unexpected(all_ids) == set()
    assert not set(rolled_back) & verdict.delivered
    assert verdict.order_violations == []
    assert verdict.duplicates == 0
    assert relay.stats.published == 2000


async def test_sigterm_drains_releases_leases_and_exits_0(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await new_topic("orders")
    emit_orders(backend, topic, 300, keys=10)
    proc = RelayProcess(relay_env(backend, kafka_bootstrap), tmp_path / "relay.log")
    await wait_drained(backend, 60)
    code = proc.terminate(60)
    assert code == 0, proc.log()
    assert "relay stopped" in proc.log()
    owners = [row[1] for row in backend.fetch("lease_rows")]
    assert owners
    assert all(owner is None for owner in owners), owners  # every lease released
