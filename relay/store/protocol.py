"""The relay's view of the database: the Store protocol and the rows it hands out.

One implementation (relay.store.sql.SqlStore) serves Postgres and SQLite, and passes
tests/integration/test_store_conformance*.py on both. Errors leave a store only as
RelayError subclasses (StoreUnavailable); the SQL is in outbox_core/sql.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from outbox_core.database_url import Dialect

Policy = Literal["block_key", "skip"]


class ClaimedRow(NamedTuple):
    """A claimed row (a NamedTuple: built per row, so cheap); the claims' columns are named
    as these fields and read by name."""

    id: int
    shard: int
    event_id: str
    topic: str
    key: str
    event_type: str
    payload: bytes
    headers_json: str
    attempts: int
    created_at: float  # epoch seconds, for commit-to-ack latency
    tenant: str | None  # emit(..., tenant=); None for an untenanted row


@dataclass(frozen=True)
class TenantTurns:
    """A fair claim (fair_tenants): each shard's batch takes turns between the tenants with
    rows in the shard, the untenanted rows being one tenant of their own. A tenant of
    weight w gets w rows a turn (1 unless named in weights); max_rows caps one tenant's
    rows in one shard's batch."""

    weights: Mapping[str, int] = field(default_factory=dict)
    max_rows: int | None = None
    # The lane's share of the tenants (lanes.py), '' naming the untenanted rows: only
    # these (None: any), never those in skip.
    only: frozenset[str] | None = None
    skip: frozenset[str] = frozenset()

    @property
    def lone(self) -> str | None:
        """The one tenant the claim is for, when it names exactly one: its turns are its
        rows in id order, so the claim needs no ranking (outbox_claim_batch_tenant)."""
        if self.only is None or len(self.only) != 1 or self.only & self.skip:
            return None
        return next(iter(self.only))


# No byte budget: more than any claim can hold.
UNBOUNDED_BYTES = 2**62


@dataclass(frozen=True)
class ClaimRequest:
    """What Store.claim is asked for: the shards, at most limit rows each, under policy;
    in_flight: ids sent and not settled yet, left out; turns: a fair claim (fair_tenants).

    shard_bytes: each shard's rows stop before their payloads pass this many bytes, but
    the first row of the first shard goes whatever its size (so no event is ever too
    large to be claimed). held_keys: keys whose rows are not to be read at all."""

    shards: Sequence[int]
    limit: int
    policy: Policy
    in_flight: Sequence[int] = ()
    turns: TenantTurns | None = None
    shard_bytes: int = UNBOUNDED_BYTES
    held_keys: Sequence[str] = ()


@dataclass(frozen=True)
class Failure:
    id: int
    error: str
    delay_s: float
    park: bool


# retention=keep: the largest payload a settle copies into the history by default.
MOVE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class SettleRequest:
    """What Store.settle is asked to write: as owner, fenced by each shard's token, the acked
    rows (deleted, or marked published with keep) and the failures."""

    owner: str
    tokens: Mapping[int, int]  # shard -> our fencing token
    published_ids: Sequence[int]
    failures: Sequence[Failure]
    keep: bool
    # keep: acked rows with larger payloads are marked published where they are instead of
    # moved into the history (Postgres; PurgeSettings.retention_move_max_bytes).
    move_max_bytes: int = MOVE_MAX_BYTES


@dataclass(frozen=True)
class Settled:
    published: int
    failed: int
    lost: frozenset[int] = frozenset()  # shards no longer ours: their rows were left alone


@dataclass(frozen=True)
class Lease:
    shard: int
    owner: str | None
    token: int
    live: bool

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Lease:
        shard, owner, token, live = row
        return cls(int(shard), owner, int(token), bool(live))


@dataclass(frozen=True)
class Backlog:
    pending: int
    parked: int
    oldest_pending_age_s: float

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Backlog:
        pending, parked, oldest = row
        return cls(int(pending), int(parked), float(oldest or 0.0))


@dataclass(frozen=True)
class TenantBacklog:
    """Pending rows of one tenant (None: the untenanted rows), or of every tenant past the
    top ones together (other)."""

    tenant: str | None
    other: bool
    pending: int
    oldest_pending_age_s: float

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> TenantBacklog:
        tenant, other, pending, oldest = row
        return cls(tenant, bool(other), int(pending), float(oldest or 0.0))


@dataclass(frozen=True)
class AppliedMigration:
    version: int
    name: str
    checksum: str


@dataclass(frozen=True)
class FloorMark:
    """The first half of a claim floor round (relay/control/floors.py): the last id drawn
    when it was read, and the transactions that held outbox_events for writing then."""

    last_id: int
    writers: tuple[str, ...]


@dataclass(frozen=True)
class HorizonHolder:
    """The oldest of one kind of what keeps vacuum from removing dead rows: a
    transaction, a snapshot, a replication slot or a prepared transaction."""

    kind: Literal["transaction", "snapshot", "replication_slot", "prepared_xact"]
    age_s: float | None  # None where Postgres keeps no time (a slot)
    xid_age: int
    pid: int | None
    application_name: str | None
    state: str | None  # pg_stat_activity.state; a slot's or prepared xact's name

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> HorizonHolder:
        age = row["age_s"]
        return cls(
            kind=row["kind"],
            age_s=None if age is None else float(age),
            xid_age=int(row["xid_age"]),
            pid=None if row["pid"] is None else int(row["pid"]),
            application_name=row["application_name"],
            state=row["state"],
        )


@dataclass(frozen=True)
class Rotation:
    """One round of the partition maintenance of kept rows (relay/control/purge.py)."""

    retention_s: float
    width_s: int
    ahead_s: int
    lock_timeout_ms: int


@dataclass(frozen=True)
class Rotated:
    created: int
    dropped: int
    skipped: int  # DDL that could not have its locks at once (the parent) or in time (others)


# The most rows one listing of parked or retained rows takes when a limit is given.
MAX_LIMIT = 1_000_000


@dataclass(frozen=True)
class RowFilter:
    """Which parked rows an operator action applies to; None means any. limit None: every
    matching row."""

    ids: list[int] | None = None
    topic: str | None = None
    key: str | None = None
    error: str | None = None  # text the last error contains (not a pattern)
    min_age_s: float = 0.0
    limit: int | None = 1000

    @property
    def narrowed(self) -> bool:
        return bool(self.ids or self.topic or self.key or self.error or self.min_age_s)


@dataclass(frozen=True)
class ParkedRow:
    id: int
    event_id: str
    topic: str
    key: str
    event_type: str
    attempts: int
    last_error: str | None
    age_s: float

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> ParkedRow:
        id_, event_id, topic, key, event_type, attempts, last_error, age_s = row
        return cls(
            int(id_), str(event_id), topic, key, event_type, int(attempts), last_error, float(age_s)
        )


@dataclass(frozen=True)
class ReplayFilter:
    """Which retained (published and kept) rows a replay takes: by id, by publish time
    (since inclusive, until exclusive), or both; None means any."""

    ids: list[int] | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    limit: int = 1000


@dataclass(frozen=True)
class Changed:
    """What an operator action by id did: the ids it changed, and those asked for that
    were not eligible (unknown, or not in the state the action needs)."""

    ids: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)


class Store(Protocol):
    dialect: Dialect

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def migrations(self) -> list[AppliedMigration]: ...

    async def shard_count(self) -> int: ...

    async def max_pending_shard(self) -> int: ...

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        """The next rows of each shard (at most limit per shard, each shard's in id order,
        a prefix of them within shard_bytes), in one step for all of them, leaving out the
        rows in_flight (sent, not settled yet) and those of held_keys; an idle relay's
        claim is its probe. With turns, which rows of a shard make
        its batch is decided by turns between its tenants (still returned in id order)."""
        ...

    async def settle(self, request: SettleRequest) -> Settled:
        """Mark acked rows and record failures in one step, fenced per shard: rows of a
        shard whose lease no longer carries our token are left alone and the shard is
        reported in Settled.lost."""
        ...

    async def lease_acquire(self, shard: int, owner: str, ttl_s: float) -> int | None: ...

    async def lease_renew(self, owner: str, held: Mapping[int, int], ttl_s: float) -> set[int]: ...

    async def lease_release(self, shard: int, owner: str, token: int) -> None: ...

    async def lease_list(self) -> list[Lease]: ...

    async def replica_heartbeat(self, owner: str, ttl_s: float) -> None: ...

    async def replica_list_live(self) -> list[str]: ...

    async def replica_roster(self) -> list[tuple[str, bool]]:
        """The live replicas by name, each with whether it holds a live lease."""
        ...

    async def replica_remove(self, owner: str) -> None: ...

    async def purge(
        self, retention_s: float, idempotency_retention_s: float, limit: int
    ) -> int: ...

    async def rotate_published(self, rotation: Rotation) -> Rotated:
        """Drops the partitions of kept rows past the retention and makes the next ones
        (Postgres; nothing to do on SQLite)."""
        ...

    def set_claim_floors(self, floors: Mapping[int, int]) -> None:
        """From now on a claim of a shard skips ids at or below its floor (all published)."""
        ...

    async def floor_last_id(self) -> int | None:
        """The last id drawn; None where claims need no floor (SQLite) or none can be
        proven (a cached id sequence, or no id drawn yet)."""
        ...

    async def floor_writers(self) -> tuple[str, ...]:
        """The transactions that hold outbox_events for writing now."""
        ...

    async def floor_writers_left(self, writers: Sequence[str]) -> int: ...

    async def floor_lowest(self, floors: Mapping[int, int]) -> dict[int, int | None]:
        """Each shard's lowest unpublished id above its floor (None: none)."""
        ...

    async def floor_unpublished_between(
        self, low: int, high: Mapping[int, int]
    ) -> dict[int, int | None]:
        """Each shard's lowest unpublished id above low and at or below its high
        (None: none): one slice of the rescan below the floors."""
        ...

    async def horizon(self) -> list[HorizonHolder]:
        """The oldest of each kind of what holds the database's vacuum horizon back
        (Postgres; nothing on SQLite)."""
        ...

    async def backlog(self, shard_count: int, count_limit: int) -> Backlog:
        """Pending and parked counts, each stopping at count_limit rows so that a poll
        costs the same over any backlog, and the oldest pending age (exact)."""
        ...

    async def backlog_by_tenant(
        self, top: int, shard_count: int, count_limit: int
    ) -> list[TenantBacklog]:
        """Pending rows and oldest pending age of the top tenants by pending rows, and of
        the rest together: a bounded set, for gauges, over at most count_limit pending
        rows (Postgres: counted above the claim floors, like backlog)."""
        ...

    # Operator actions (`outbox-relay parked|replay`). Parked rows are worked by no relay,
    # so changing them needs no lease; each action by id changes only the rows still in
    # the state it needs and names the others in Changed.missing.

    async def parked_list(self, rows: RowFilter) -> list[ParkedRow]:
        """The parked rows the filter matches, in id order, at most its limit."""
        ...

    async def parked_retry(self, ids: Sequence[int]) -> Changed:
        """These rows, those still parked, pending again with fresh attempts (the last
        error is kept as history)."""
        ...

    async def parked_discard(self, ids: Sequence[int]) -> Changed:
        """These rows, those still parked, deleted: their keys' later rows go out."""
        ...

    async def replay_list(self, rows: ReplayFilter) -> list[int]:
        """The ids of the retained rows the filter matches, in id order, at most its limit."""
        ...

    async def replay(self, ids: Sequence[int]) -> Changed:
        """These retained rows pending again, under their id and event_id."""
        ...
