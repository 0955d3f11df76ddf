"""Who works which shard: a fair split among live replicas, held through fenced leases."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from relay.store import Store

log = logging.getLogger("relay.leases")


def fair_share(me: str, live: Sequence[str], shard_count: int) -> set[int]:
    """Shards this replica should hold: round-robin over the sorted live replicas.

    Every replica computes the same split from the same membership, and the counts of
    any two replicas differ by at most one.
    """
    members = sorted(set(live) | {me})
    n, index = len(members), members.index(me)
    return {s for s in range(shard_count) if s % n == index}


@dataclass
class LeaseChanges:
    acquired: dict[int, int] = field(default_factory=dict)  # shard -> token
    lost: set[int] = field(default_factory=set)
    to_release: set[int] = field(default_factory=set)
    replicas: list[str] = field(default_factory=list)


async def heartbeat(
    store: Store,
    *,
    me: str,
    held: dict[int, int],
    shard_count: int,
    ttl_s: float,
    accepting: bool,
) -> LeaseChanges:
    """One round: announce ourselves, renew what we hold, and work out what to take or give.

    `held` is not modified; the caller applies the changes (stops workers of lost shards,
    drains and releases shards to give away, starts workers for acquired ones).
    """
    changes = LeaseChanges()
    await store.replica_heartbeat(me, ttl_s)
    changes.replicas = await store.replica_list_live()
    renewed = await store.lease_renew(me, held, ttl_s)
    changes.lost = set(held) - renewed
    if not accepting:
        return changes
    wanted = fair_share(me, changes.replicas, shard_count)
    changes.to_release = (set(held) - changes.lost) - wanted
    for shard in sorted(wanted - set(held)):
        token = await store.lease_acquire(shard, me, ttl_s)
        if token is not None:
            changes.acquired[shard] = token
    return changes
