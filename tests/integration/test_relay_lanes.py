"""Lanes (issue 16) end to end on real Kafka, Postgres and SQLite: with fair turns, a
tenant's backlog drains in a bulk lane of its own, and another tenant's events go out
beside it, not behind it, with every event delivered once and in order per key."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from relay.service import RelayService
from relay.store import ClaimedRow, ClaimRequest, Store, TenantTurns
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import (
    expected_from_db,
    judge_topic,
    relay_settings,
    running_relay,
    wait_drained,
)
from tests.support.stores import emit, event, make_store
from tests.support.waits import until

pytestmark = pytest.mark.integration


class GatedBulk:
    """The real store, except that the bulk lane's claims after its first wait at a gate:
    a bulk batch as slow as the test wants. Records every claim's lane and tenants."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.gate = asyncio.Event()
        self.bulk_claims = 0
        self.claims: list[tuple[TenantTurns | None, set[str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        turns = request.turns
        if turns is not None and turns.only is not None:
            self.bulk_claims += 1
            if self.bulk_claims > 1:
                await self.gate.wait()
        rows = await self._inner.claim(request)
        self.claims.append((turns, {row.tenant or "" for row in rows}))
        return rows


def unpublished(backend: Backend) -> dict[str, int]:
    return {str(t): int(n) for t, n in backend.fetch("outbox_unpublished_by_tenant")}


# Not yet on MariaDB: there, about one run in three the quick lane did not drain beside
# the stalled bulk lane within the deadline (docs/relay.md, Known limits).
@pytest.mark.dialects("postgres", "sqlite")
async def test_a_tenant_s_events_go_out_beside_a_stalled_bulk_lane(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("orders", partitions=3)
    a_keys = [f"a-{i}" for i in range(20)]
    for _ in range(6):
        emit(backend, *(event(k, topic=topic, tenant="A") for k in a_keys for _ in range(5)))
    settings = relay_settings(
        backend,
        kafka_bootstrap,
        batch_size=50,
        fair_tenants=True,
        tenant_bulk_rows=5,
        retention="keep",
    )
    gated = GatedBulk(make_store(backend))  # opened and closed by the relay
    async with running_relay(settings, store=cast(Store, gated)) as relay:
        assert [lane.name for lane in relay.pipeline.lanes] == ["lane-quick", "lane-bulk"]
        # A's backlog moved to the bulk lane, whose second claim now waits at the gate.
        await until(lambda: gated.bulk_claims >= 2, 60, "the bulk lane to claim twice")
        for i in range(10):
            b, n = event(f"b-{i % 3}", topic=topic, tenant="B"), event(f"n-{i % 2}", topic=topic)
            emit(backend, b, n)
        # B's and the untenanted events are published while A's batch is stalled.
        await until(
            lambda: set(unpublished(backend)) == {"A"},
            60,
            "B to drain while A waits",
            blocking=True,
        )
        assert unpublished(backend)["A"] > 0
        gated.gate.set()
        await wait_drained(backend)
    for turns, tenants in gated.claims:
        assert turns is not None
        if turns.only is not None:
            assert tenants <= turns.only
        assert not tenants & turns.skip
    expected = expected_from_db(backend)
    every = [e for ids in expected.values() for e in ids]
    assert len(every) == 620
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    assert verdict.missing(every) == set()
    assert verdict.duplicates == 0
    assert verdict.order_violations == []


async def test_without_lanes_the_pipeline_is_one_loop(
    backend: Backend, kafka_bootstrap: str
) -> None:
    for over in ({}, {"fair_tenants": True, "tenant_bulk_rows": 0}):
        settings = relay_settings(backend, kafka_bootstrap, **over)
        assert settings.batch_rules().bulk_rows is None
    service = RelayService(settings)
    assert [lane.name for lane in service.pipeline.lanes] == ["lane"]
    assert service.bulk_producer is None
