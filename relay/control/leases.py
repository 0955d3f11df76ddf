"""Who works which shard: a fair split among the active replicas, held through fenced
leases.

`LeaseKeeper.run_once` is one heartbeat round: announce this replica, renew what it holds,
and work out what to take or give; it applies the changes to the pipeline (pipeline/loop.py) and
returns them. `run` calls it every heartbeat_interval_s.

With active_replicas set, only that many live replicas hold shards (those already holding
leases first, so a replica joining moves nothing); the others are standbys: they hold no
shard, so they never probe or claim, and their only statements are the heartbeat's two
(announce, read the roster), which is what lets them take over within the lease TTL.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field, model_validator

from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import Supervisor
from relay.errors import StoreUnavailable
from relay.ops.observer import RelayObserver
from relay.pipeline.loop import Pipeline
from relay.store import Store

log = logging.getLogger("relay.leases")


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LeaseSettings(SettingsGroup):
    lease_ttl_s: float = Field(
        default=10.0,
        ge=1.0,
        description="Shard lease length on the database clock; a crashed replica's shards move after it.",
    )
    heartbeat_interval_s: float = Field(
        default=2.0, gt=0, description="How often leases and membership are renewed."
    )
    active_replicas: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="How many live replicas hold shards; the others stand by (a heartbeat "
        "only: no probe, no claim) and take over within lease_ttl_s when an active one goes. "
        "1 makes a fleet of sidecars cost the database what one relay costs. 0: every live "
        "replica holds shards.",
    )
    replica_id: str = Field(
        default_factory=default_replica_id,
        min_length=1,
        max_length=200,
        description="This replica's name in the lease table (default host-pid-random); on "
        "MariaDB its sessions also carry it in @outbox_replica_id, for audit triggers.",
    )

    @model_validator(mode="after")
    def _intervals(self) -> LeaseSettings:
        if self.heartbeat_interval_s * 2 > self.lease_ttl_s:
            raise ValueError(
                "heartbeat_interval_s (OUTBOX_HEARTBEAT_INTERVAL_S) must be at most half of "
                "lease_ttl_s (OUTBOX_LEASE_TTL_S), or leases expire between renewals"
            )
        return self


def fair_share(me: str, live: Sequence[str], shard_count: int) -> set[int]:
    """Shards this replica should hold: round-robin over the sorted live replicas.

    Every replica computes the same split from the same membership, and the counts of
    any two replicas differ by at most one.
    """
    members = sorted(set(live) | {me})
    n, index = len(members), members.index(me)
    return {s for s in range(shard_count) if s % n == index}


def active_set(
    me: str, roster: Sequence[tuple[str, bool]], me_holds: bool, limit: int
) -> list[str]:
    """The replicas that hold shards, sorted: at most `limit` (0: all) of the live ones,
    those holding a lease first, then by name.

    Every replica computes the same set from the same roster. Holders first means a
    replica that joins (a new pod, a rolling restart) never takes shards from one that
    works them; when an active replica goes, its leases and membership expire together
    and the next standby by name steps in.
    """
    holds = dict(roster)
    holds[me] = holds.get(me, False) or me_holds
    ranked = sorted(holds, key=lambda name: (not holds[name], name))
    return sorted(ranked if limit == 0 else ranked[:limit])


@dataclass
class LeaseChanges:
    acquired: dict[int, int] = field(default_factory=dict)  # shard -> token
    # shard -> the replica that held an acquired lease before (None: free or released)
    previous: dict[int, str | None] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    to_release: set[int] = field(default_factory=set)
    replicas: list[str] = field(default_factory=list)
    active: bool = True  # this replica is among those holding shards


async def heartbeat(
    store: Store,
    *,
    me: str,
    held: dict[int, int],
    shard_count: int,
    ttl_s: float,
    accepting: bool,
    active_replicas: int = 0,
) -> LeaseChanges:
    """One round against the store; `held` is not modified (the caller applies changes).
    A standby holding nothing runs two statements: no lease to renew, none to take."""
    changes = LeaseChanges()
    await store.replica_heartbeat(me, ttl_s)
    roster = await store.replica_roster()
    changes.replicas = [name for name, _ in roster]
    renewed = await store.lease_renew(me, held, ttl_s) if held else set()
    changes.lost = set(held) - renewed
    if not accepting:
        return changes
    active = active_set(me, roster, bool(renewed), active_replicas)
    changes.active = me in active
    wanted = fair_share(me, active, shard_count) if changes.active else set()
    changes.to_release = (set(held) - changes.lost) - wanted
    taking = sorted(wanted - set(held))
    # Who holds each lease before the take: its previous holder, which a transactional
    # relay fences (relay/transport/transactions.py), is the one read here when the
    # take bumped this token by exactly one.
    before = {lease.shard: lease for lease in await store.lease_list()} if taking else {}
    for shard in taking:
        token = await store.lease_acquire(shard, me, ttl_s)
        if token is None:
            continue
        seen = before.get(shard)
        if token != (1 if seen is None else seen.token + 1):
            # Taken and lost again by another replica between the read and the take: its
            # last holder is not known, so the lease goes back, to be taken next round.
            log.warning("lease changed hands while being taken; released", extra={"shard": shard})
            await store.lease_release(shard, me, token)
            continue
        changes.acquired[shard] = token
        changes.previous[shard] = None if seen is None else seen.owner
    return changes


class LeaseKeeper:
    def __init__(
        self,
        settings: LeaseSettings,
        *,
        shard_count: int,
        store: Store,
        pipeline: Pipeline,
        observer: RelayObserver,
        supervisor: Supervisor,
    ) -> None:
        self.settings = settings
        # The database's, set again by the service once start-up has read it.
        self.shard_count = shard_count
        self._store = store
        self._pipeline = pipeline
        self._observer = observer
        self._sup = supervisor
        # Set by each lease round: this replica holds no shard by active_replicas.
        self.standing_by = False

    async def run_once(self) -> LeaseChanges | None:
        """One round, applied; None when the database did not answer."""
        s = self.settings
        try:
            changes = await heartbeat(
                self._store,
                me=s.replica_id,
                held=self._pipeline.held,
                shard_count=self.shard_count,
                ttl_s=s.lease_ttl_s,
                accepting=not self._sup.stopping.is_set(),
                active_replicas=s.active_replicas,
            )
        except StoreUnavailable as exc:
            self._observer.store_error()
            log.warning("lease heartbeat failed", extra={"error": str(exc)})
            return None
        self._sup.tick()
        self.standing_by = not changes.active
        for shard in changes.lost:
            self._observer.lease_lost()
            log.warning("lease lost; no more claims for the shard", extra={"shard": shard})
            self._pipeline.drop(shard)
        for shard in changes.to_release:
            self._sup.spawn(f"release-{shard}", lambda shard=shard: self._pipeline.hand_over(shard))  # type: ignore[misc]
        for shard, token in changes.acquired.items():
            if token > 1:
                self._observer.takeover()
            log.info("lease acquired", extra={"shard": shard, "token": token})
            self._pipeline.start(shard, token, changes.previous.get(shard))
        self._observer.lease_round(
            len(changes.replicas), len(self._pipeline.held), active=changes.active
        )
        return changes

    async def run(self) -> None:
        while not self._sup.stopping.is_set():
            await self.run_once()
            await self._sup.sleep(self.settings.heartbeat_interval_s)
