"""A lease round names the replica each lease was taken from (what a transactional relay
fences before the shard's first claim), on every database: the expired holder, nobody
for a released lease, and never a guess: a lease that changed hands between the round's
read and its take is given back."""

from __future__ import annotations

from typing import Any

import pytest

from relay.control.leases import heartbeat
from relay.store import Store
from tests.support.waits import until

pytestmark = pytest.mark.integration

SHARD = 0


async def expired(store: Store, shard: int = SHARD) -> bool:
    return not any(lease.live for lease in await store.lease_list() if lease.shard == shard)


async def take(store: Store, me: str) -> tuple[dict[int, int], dict[int, str | None]]:
    changes = await heartbeat(store, me=me, held={}, shard_count=1, ttl_s=30, accepting=True)
    return changes.acquired, changes.previous


async def test_a_lease_taken_after_it_expired_names_its_holder(store: Store) -> None:
    assert await store.lease_acquire(SHARD, "a", 1.0) == 1
    await until(lambda: expired(store), 30, "a's lease to expire")
    assert await take(store, "b") == ({SHARD: 2}, {SHARD: "a"})


async def test_a_new_lease_names_no_one(store: Store) -> None:
    assert await take(store, "b") == ({SHARD: 1}, {SHARD: None})


async def test_a_released_lease_names_no_one(store: Store) -> None:
    assert await store.lease_acquire(SHARD, "a", 30) == 1
    await store.lease_release(SHARD, "a", 1)
    assert await take(store, "b") == ({SHARD: 2}, {SHARD: None})


class TakenMeanwhile:
    """A store whose lease take first lets replica c take the lease and lose it: the
    holder the round read is no longer the last one."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def lease_acquire(self, shard: int, owner: str, ttl_s: float) -> int | None:
        assert await self.inner.lease_acquire(shard, "c", 1.0) is not None
        await until(lambda: expired(self.inner, shard), 30, "c's lease to expire")
        return await self.inner.lease_acquire(shard, owner, ttl_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_lease_that_changed_hands_while_being_taken_is_given_back(
    store: Store,
) -> None:
    assert await store.lease_acquire(SHARD, "a", 1.0) == 1
    await until(lambda: expired(store), 30, "a's lease to expire")
    meanwhile: Any = TakenMeanwhile(store)
    assert await take(meanwhile, "b") == ({}, {})
    (lease,) = await store.lease_list()
    assert (lease.owner, lease.token, lease.live) == (None, 3, False)
    assert await take(store, "b") == ({SHARD: 4}, {SHARD: None})
