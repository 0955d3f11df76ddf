"""Standby replicas (active_replicas) on real Postgres: a replica that holds no shard
never claims (no probe) and never settles, its only statements are the heartbeat's; it
takes over when the active replica goes. A lost NOTIFY hint only delays an event until
the probe finds it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from producer_lib import Outbox
from relay.database import make_store
from relay.service import RelayService
from relay.store import Store
from relay.transport.memory import MemoryPublisher
from tests.support.db import Backend, postgres_backend
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import emit, event
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration

SHARD_COUNT = 16  # what the migrations record


def counted_store(settings: Any, calls: Counter[str]) -> Store:
    """The relay's own store, each of its statements' methods counted as it is called."""
    store = make_store(settings.database)
    names = (
        "claim",
        "settle",
        "lease_acquire",
        "lease_renew",
        "replica_heartbeat",
        "floor_last_id",
        "floor_unpublished_between",
    )
    for name in (*names, "purge", "backlog", "horizon"):
        method: Callable[..., Awaitable[Any]] = getattr(store, name)

        async def counted(*a: Any, _name: str = name, _m: Any = method, **kw: Any) -> Any:
            calls[_name] += 1
            return await _m(*a, **kw)

        setattr(store, name, counted)
    return store


async def test_a_standby_issues_no_probe_claim_or_settle_and_takes_over(pg_url: str) -> None:
    backend: Backend = postgres_backend(pg_url)
    backend.migrate()
    fleet = {
        "active_replicas": 1,
        "probe_idle_after_s": 0.2,
        "gauges_interval_s": 0.2,
        "purge_interval_s": 0.2,
        "horizon_interval_s": 0.2,
    }
    first = relay_settings(backend, "127.0.0.1:9092", replica_id="relay-a", **fleet)
    second = relay_settings(backend, "127.0.0.1:9092", replica_id="relay-b", **fleet)
    calls: Counter[str] = Counter()
    published = MemoryPublisher()
    active = RelayService(first, publisher=published)
    task = asyncio.create_task(active.run())
    try:
        await until(
            lambda: len(active.pipeline.held) == SHARD_COUNT, 30, "relay-a to hold every shard"
        )
        store = counted_store(second, calls)
        async with running_relay(second, store=store, publisher=MemoryPublisher()) as standby:
            await until(lambda: standby.stats.heartbeats >= 4, 30, "the standby's heartbeats")
            # The fleet-wide rounds (gauges, purge, the horizon's look) ran at most once,
            # before the standby's first lease round told it it stands by.
            fleet_rounds = (calls["backlog"], calls["purge"], calls["horizon"])
            floor_rounds = calls["floor_last_id"] + calls["floor_unpublished_between"]
            assert max(fleet_rounds) <= 1, calls
            emit(backend, *(event(f"k{i}") for i in range(50)))
            await wait_drained(backend, 30)
            await until(lambda: active.stats.published == 50, 30, "the active's 50 published")
            await until(lambda: standby.stats.heartbeats >= 8, 30, "more heartbeats")
            assert standby.pipeline.held == {}
            assert standby.observer.metrics.active._value.get() == 0.0
            # The statements a standby ran: heartbeats only (no lease to renew, none taken).
            assert calls["claim"] == calls["settle"] == calls["lease_acquire"] == 0, calls
            assert calls["lease_renew"] == 0, calls
            assert calls["replica_heartbeat"] >= 8
            assert (calls["backlog"], calls["purge"], calls["horizon"]) == fleet_rounds, calls
            # Nor the claim floors' rounds (ten a second on an active relay).
            assert calls["floor_last_id"] + calls["floor_unpublished_between"] == floor_rounds
            assert (standby.stats.probes, standby.stats.claims, standby.stats.settles) == (0, 0, 0)
            assert active.stats.published == 50
            assert active.stats.probes > 0

            active.stop()  # graceful: its leases are released, the standby steps in
            await asyncio.wait_for(task, 60)
            await until(lambda: len(standby.pipeline.held) == SHARD_COUNT, 30, "the takeover")
            emit(backend, *(event(f"later{i}") for i in range(20)))
            await wait_drained(backend, 30)
            # The settle's commit comes before the lane records its outcome.
            await until(lambda: standby.stats.published == 20, 30, "the standby's 20 published")
            await until(lambda: calls["backlog"] > fleet_rounds[0], 30, "the active's gauges")
            await until(lambda: calls["horizon"] > fleet_rounds[2], 30, "the active's horizon look")
            assert calls["claim"] > 0
            assert calls["settle"] > 0
            assert calls["floor_last_id"] > 0  # the floors' rounds, once it is active
    finally:
        active.stop()
        await asyncio.wait_for(task, 60)
    assert len(published.sent) == 50


async def test_a_lost_hint_only_delays_an_event_until_the_probe(pg_url: str) -> None:
    """Hints on, but the producer sends none (as if every one were lost): the probe at
    probe_idle_interval_s still finds each event."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    publisher = MemoryPublisher()
    settings = relay_settings(
        backend,
        "127.0.0.1:9092",
        listen_notify=True,
        probe_idle_after_s=0.1,
        probe_idle_interval_s=0.5,
    )
    silent = Outbox()  # no notify_channel: no hint ever reaches the relay
    async with running_relay(settings, publisher=publisher) as relay:
        for n in range(3):
            await asyncio.sleep(0.5)  # idle: only the probe or a hint could find it
            with sync_tx(backend, "driver") as conn:
                silent.emit(conn, topic="orders", key=f"k{n}", event_type="E", payload={"n": n})
            await wait_drained(backend, 30)
        # The settle commits before the cycle's outcome reaches the stats.
        await until(lambda: relay.stats.published >= 3, 30, "the three settles counted")
        assert relay.stats.published == 3
        assert relay.stats.probes > 0
