"""Row locks between a settle in progress and the lease statements, on real Postgres.

A settle holds its shards' lease rows FOR KEY SHARE until it commits. A takeover must
wait for it (the new holder's first claim would otherwise race the old holder's writes),
while a renewal and another lane's settle must not: with lanes, a renewal that waited
behind the bulk lane's long settle held the quick lane's settle behind it. SQLite has no
row locks (one writer at a time), so these are Postgres only.

The settle in progress is the store's own statement run in a transaction left open; the
other statements run with a lock_timeout, so waiting shows as LockNotAvailable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest

from outbox_core.queries import query
from relay.control.purge import PurgeSettings
from tests.support.db import Backend
from tests.support.stores import emit, event, keys_on_shard, opened_store, row_states, settle

pytestmark = pytest.mark.integration

SHARD = 3
OWNER = "relay-1"


@pytest.fixture
def settling(pg: Backend) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose transaction is left open by the test (a settle in progress)."""
    with psycopg.connect(pg.target) as conn:
        yield conn


def settle_params(token: int, published: list[int]) -> dict[str, Any]:
    return {
        "owner": OWNER,
        "shards": [SHARD],
        "tokens": [token],
        "published_ids": published,
        "failed_ids": [],
        "errors": [],
        "delays_s": [],
        "parks": [],
        "move_max_bytes": PurgeSettings().retention_move_max_bytes,
    }


def run_unwaiting(url: str, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Runs one named statement, committed; LockNotAvailable if it has to wait for a lock."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '1s'")
        return conn.execute(query("postgres", name), params).fetchall()


async def test_a_renewal_and_another_settle_go_ahead_beside_a_settle_in_progress(
    pg: Backend, settling: psycopg.Connection[Any]
) -> None:
    pg_url = pg.target
    a, b = keys_on_shard(SHARD, 2)
    r1, r2 = emit(pg, event(a), event(b))
    async with opened_store(pg) as store:
        token = await store.lease_acquire(SHARD, OWNER, 30)
        assert token is not None
        # The bulk lane's settle, not committed yet.
        settling.execute(query("postgres", "outbox_settle_keep"), settle_params(token, [r1]))

        renewed = run_unwaiting(
            pg_url,
            "lease_renew",
            {"owner": OWNER, "shards": [SHARD], "tokens": [token], "ttl_s": 30.0},
        )
        assert [int(r[0]) for r in renewed] == [SHARD]
        # The quick lane's settle of another row of the same shard.
        (quick,) = run_unwaiting(pg_url, "outbox_settle_delete", settle_params(token, [r2]))
        assert (list(quick[0]), quick[1]) == ([SHARD], 1)

        settling.commit()
        states = row_states(pg)
        assert states[r1].published
        assert r2 not in states  # deleted by the quick lane's settle


async def test_a_takeover_waits_for_the_old_holder_s_settle_to_commit(
    pg: Backend, settling: psycopg.Connection[Any]
) -> None:
    pg_url = pg.target
    (a,) = keys_on_shard(SHARD, 1)
    r1, r2 = emit(pg, event(a), event(a))
    async with opened_store(pg) as store:
        old = await store.lease_acquire(SHARD, OWNER, 0.5)
        assert old is not None
        await asyncio.sleep(0.8)  # expired: anyone may take it over
        settling.execute(query("postgres", "outbox_settle_keep"), settle_params(old, [r1]))

        take = {"shard": SHARD, "owner": "relay-2", "ttl_s": 30.0}
        with pytest.raises(psycopg.errors.LockNotAvailable):
            run_unwaiting(pg_url, "lease_acquire", take)

        settling.commit()
        assert await store.lease_acquire(SHARD, "relay-2", 30) == old + 1
        # The old holder's settle stood (it committed first); its next one is refused.
        assert row_states(pg)[r1].published
        late = await settle(store, OWNER, {SHARD: old}, [r2], [], keep=True)
        assert late.lost == {SHARD}
        assert not row_states(pg)[r2].published
