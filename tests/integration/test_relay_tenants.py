"""Fair turns through the relay's own step (Step.run: claim, publish, settle) and its
gauges, on real Postgres and SQLite with the in-memory publisher standing in for Kafka."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from outbox_core.supervisor import Supervisor
from relay.config import RelaySettings
from relay.control.gauges import Gauges
from relay.ops.observer import RelayObserver
from relay.pipeline.step import BatchOutcome, Step
from relay.store import Store
from relay.transport.memory import MemoryPublisher
from tests.support.db import Backend
from tests.support.relay import relay_settings
from tests.support.stores import emit, event, keys_on_shard

pytestmark = pytest.mark.integration

SHARD = 3
BOOTSTRAP = "127.0.0.1:9092"  # never contacted


def settings_for(backend: Backend, **over: Any) -> RelaySettings:
    return relay_settings(backend, BOOTSTRAP, **{"batch_size": 20, "retention": "delete", **over})


async def step(store: Store, publisher: MemoryPublisher, settings: RelaySettings) -> BatchOutcome:
    owner = settings.leases.replica_id
    token = await store.lease_acquire(SHARD, owner, 30)
    if token is None:  # ours since an earlier step
        (token,) = [lease.token for lease in await store.lease_list() if lease.shard == SHARD]
    return await Step(settings.batch_rules(), store=store, publisher=publisher).run({SHARD: token})


def flood_then_trickle(backend: Backend) -> dict[str, str]:
    """Tenant A commits 60 rows on two keys, then B 3 rows and an untenanted row; returns
    event_id -> tenant label."""
    a1, a2, b, n = keys_on_shard(SHARD, 4)
    emit(backend, *(event(k, tenant="A") for _ in range(30) for k in (a1, a2)))
    emit(backend, *(event(b, tenant="B") for _ in range(3)), event(n))
    owners = {a1: "A", a2: "A", b: "B", n: "-"}
    return {str(r[1]): owners[str(r[3])] for r in backend.fetch("outbox_rows")}


def tenants_sent(publisher: MemoryPublisher, owner: dict[str, str]) -> list[str]:
    return [owner[dict(r.headers)["event_id"].decode()] for r in publisher.sent]


async def test_without_fair_turns_the_flood_goes_first(backend: Backend, store: Store) -> None:
    owner = flood_then_trickle(backend)
    publisher = MemoryPublisher()
    outcome = await step(store, publisher, settings_for(backend))
    assert (outcome.published, outcome.full) == (20, True)
    assert set(tenants_sent(publisher, owner)) == {"A"}


async def test_fair_turns_serve_every_tenant_in_the_first_batch(
    backend: Backend, store: Store
) -> None:
    owner = flood_then_trickle(backend)
    row_id = {str(r[1]): int(r[0]) for r in backend.fetch("outbox_rows")}
    publisher = MemoryPublisher()
    settings = settings_for(backend, fair_tenants=True, tenant_weights="A=2")
    outcome = await step(store, publisher, settings)
    assert (outcome.published, outcome.full) == (20, True)
    first = tenants_sent(publisher, owner)
    assert sorted(first) == ["-"] + ["A"] * 16 + ["B"] * 3
    while (await step(store, publisher, settings)).claimed:
        pass
    assert len(publisher.sent) == 64
    # Each key's events went out in commit (id) order.
    for key in {r.key for r in publisher.sent}:
        ids = [row_id[dict(r.headers)["event_id"].decode()] for r in publisher.sent if r.key == key]
        assert ids == sorted(ids), key


async def test_a_capped_tenant_waits_for_the_next_cycle_which_starts_at_once(
    backend: Backend, store: Store
) -> None:
    owner = flood_then_trickle(backend)
    publisher = MemoryPublisher()
    settings = settings_for(backend, fair_tenants=True, tenant_max_rows=5)
    outcome = await step(store, publisher, settings)
    # A's five, B's three, the untenanted one: below batch_size, yet A has more waiting.
    assert (outcome.published, outcome.full) == (9, True)
    assert sorted(tenants_sent(publisher, owner)) == ["-"] + ["A"] * 5 + ["B"] * 3
    outcome = await step(store, publisher, settings)
    assert (outcome.published, outcome.full) == (5, True)


async def test_the_gauges_show_the_top_tenants_and_the_rest(backend: Backend, store: Store) -> None:
    flood_then_trickle(backend)
    settings = settings_for(backend, gauges_tenant_top=1)
    observer = RelayObserver()
    gauges = Gauges(
        settings.gauges,
        shard_count=16,
        store=store,
        observer=observer,
        supervisor=Supervisor(logging.getLogger("test")),
    )
    await gauges.run_once()
    pending = {
        s.labels["tenant"]: s.value
        for family in observer.metrics.registry.collect()
        if family.name == "outbox_relay_tenant_pending_rows"
        for s in family.samples
    }
    assert pending == {"A": 60, "other": 4}
