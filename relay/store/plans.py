"""The store's statements that the operator commands run too, as plans
(outbox_core.executors.Plan): each one's parameters are encoded and its rows decoded here,
once, whether SqlStore runs it on its pools or `outbox-relay status|parked|replay`
(relay/ops/admin.py) runs it on a connection of its own.

The commands do not call a Store: they run synchronously, each action in one transaction
on one connection opened without the relay's timeouts, where a Store is asynchronous and
owns pools sized for a running relay (and, on SQLite, the file lock a running relay
holds). A plan serves both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from outbox_core.codec import Codec
from outbox_core.database_url import Dialect
from outbox_core.executors import Plan, Statement
from relay.store.protocol import (
    Backlog,
    Changed,
    Lease,
    ParkedRow,
    ReplayFilter,
    RowFilter,
    TenantBacklog,
)

# The LIMIT of "every row" (a NULL limit is not portable).
_UNBOUNDED = 2**62

ParkedAction = Literal["retry", "discard"]
_PARKED_ACTIONS: dict[ParkedAction, str] = {
    "retry": "outbox_parked_retry",
    "discard": "outbox_parked_discard",
}


def shard_count() -> Plan:
    """The shard count the database records (0 before migrations)."""
    rows = yield Statement("setting_get", {"name": "shard_count"})
    return int(rows[0][0]) if rows else 0


# A count limit no backlog reaches: `status` counts every row.
EXACT = 2**62


def _backlog_params(
    codec: Codec, shard_count: int, floors: Mapping[int, int], count_limit: int
) -> dict[str, object]:
    """What both backlog statements walk: every shard from its claim floor (a shard not
    named: from 0), at most count_limit rows."""
    shards = list(range(shard_count))
    return {
        "shard_count": shard_count,  # SQLite
        "shards": codec.array(shards),
        "floors": codec.array([floors.get(shard, 0) for shard in shards]),
        "count_limit": count_limit,
    }


def backlog(
    codec: Codec, shard_count: int, floors: Mapping[int, int], count_limit: int = EXACT
) -> Plan:
    """Backlog counts, each stopping at count_limit rows."""
    rows = yield Statement(
        "outbox_backlog", _backlog_params(codec, shard_count, floors, count_limit)
    )
    return Backlog.from_row(rows[0])


def backlog_by_tenant(
    codec: Codec, top: int, shard_count: int, floors: Mapping[int, int], count_limit: int
) -> Plan:
    """The top tenants by pending rows, and the rest together, over at most count_limit
    pending rows."""
    params = {"top": top, **_backlog_params(codec, shard_count, floors, count_limit)}
    rows = yield Statement("outbox_backlog_by_tenant", params)
    return [TenantBacklog.from_row(r) for r in rows]


def lease_list() -> Plan:
    rows = yield Statement("lease_list")
    return [Lease.from_row(r) for r in rows]


def replica_list_live() -> Plan:
    rows = yield Statement("replica_list_live")
    return [str(r[0]) for r in rows]


def parked_list(codec: Codec, rows: RowFilter) -> Plan:
    found = yield Statement(
        "outbox_parked_list",
        {
            "ids": codec.array(rows.ids),
            "topic": rows.topic,
            "key": rows.key,
            "error": rows.error,
            "min_age_s": codec.seconds(rows.min_age_s),
            "limit": _UNBOUNDED if rows.limit is None else rows.limit,
        },
    )
    return [ParkedRow.from_row(r) for r in found]


def parked_act(codec: Codec, action: ParkedAction, ids: Sequence[int]) -> Plan:
    return (yield from _by_ids(_PARKED_ACTIONS[action], codec, ids))


def replay_list(codec: Codec, rows: ReplayFilter) -> Plan:
    found = yield Statement(
        "outbox_replay_list",
        {
            "ids": codec.array(rows.ids),
            "since": codec.time(rows.since),
            "until": codec.time(rows.until),
            "limit": rows.limit,
        },
    )
    return [int(r[0]) for r in found]


def replay(codec: Codec, ids: Sequence[int]) -> Plan:
    return (yield from _by_ids("outbox_replay", codec, ids))


# Dialects without UPDATE ... RETURNING (MariaDB): an action picks and locks the rows it
# will change first (`<action>_pick`, SELECT ... FOR UPDATE), then runs its steps over
# exactly those ids, in the one transaction the plan runs in.
_PICKED_FIRST: frozenset[Dialect] = frozenset({"mariadb"})
_STEPS: dict[str, tuple[str, ...]] = {
    "outbox_replay": (
        "outbox_replay_unmark",
        "outbox_replay_restore",
        "outbox_replay_restored_drop",
    )
}


def _by_ids(query: str, codec: Codec, ids: Sequence[int]) -> Plan:
    """One statement over exactly these ids, returning those it changed; an empty list
    runs nothing."""
    done: list[int] = []
    if ids and codec.dialect in _PICKED_FIRST:
        done = sorted(
            int(r[0]) for r in (yield Statement(f"{query}_pick", {"ids": codec.array(ids)}))
        )
        for step in _STEPS.get(query, (query,)) if done else ():
            yield Statement(step, {"ids": codec.array(done)})
    elif ids:
        done = sorted(int(r[0]) for r in (yield Statement(query, {"ids": codec.array(ids)})))
    return Changed(done, sorted(set(ids) - set(done)))
