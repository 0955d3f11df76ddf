"""The side loops (backlog gauges, claim floors, horizon, purge) run on connections of their
own: however long their statements wait, a claim, a settle and a lease round go on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from relay.database import DatabaseSettings, make_store
from relay.store import Store
from tests.support.db import Backend
from tests.support.stores import claim, emit, event, keys_on_shard, settle
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.dialects("postgres", "mariadb")]

SHARD = 5
OWNER = "side-loops"


@pytest.fixture
async def patient_store(backend: Backend) -> AsyncIterator[Store]:
    # Lock waits longer than the test: the purges stay blocked until it lets them go.
    settings = DatabaseSettings(
        database_url=SecretStr(backend.url),
        database_statement_timeout_s=300,
        database_side_statement_timeout_s=300,
        database_lock_timeout_s=300,
    )
    store = make_store(settings)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_purges_waiting_on_locks_hold_up_no_claim_settle_or_lease_round(
    backend: Backend, patient_store: Store
) -> None:
    store = patient_store
    (key,) = keys_on_shard(SHARD, 1)
    [row_id] = emit(backend, event(key, idempotency_key="side-1"))
    backend.rewind(3600)  # the idempotency key is past any retention

    blocker = backend.connect()
    purges: list[asyncio.Task[int]] = []
    try:
        backend.run_on(blocker, "idempotency_rows_lock")
        # Two purges, as many as the side loops have connections: both wait on the lock.
        purges = [asyncio.create_task(store.purge(3600, 1, 100)) for _ in range(2)]
        await until(
            lambda: backend.lock_waiters() >= 2,
            30,
            "both purges waiting on the held idempotency keys",
            blocking=True,
        )

        # The hot path and the lease round meanwhile, on their own connections.
        token = await store.lease_acquire(SHARD, OWNER, 30)
        assert token is not None
        await store.replica_heartbeat(OWNER, 30)
        assert await store.lease_renew(OWNER, {SHARD: token}, 30) == {SHARD}
        rows = await claim(store, [SHARD], 10, "block_key")
        assert [r.id for r in rows] == [row_id]
        settled = await settle(store, OWNER, {SHARD: token}, [row_id], [], False)
        assert settled.published == 1
        assert not any(p.done() for p in purges), "the purges did not wait: nothing was proven"
    finally:
        blocker.rollback()
        blocker.close()
        removed = await asyncio.gather(*purges)
    assert sum(removed) == 1  # the one key: each purge saw it, one removed it
