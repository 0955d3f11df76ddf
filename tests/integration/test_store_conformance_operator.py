"""The Store's operator actions (`outbox-relay parked|replay` run the same plans), written
once and run against every backend: parked rows listed, retried and discarded, retained
rows listed and replayed, each action by id changing only the rows in the state it needs
and naming the others, whatever ids it is handed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from relay.store import Changed, Failure, ReplayFilter, RowFilter, Store
from tests.support.db import Backend
from tests.support.ops import backdate
from tests.support.stores import (
    claim,
    emit,
    event,
    ids_of,
    keys_on_shard,
    row_states,
    settle,
    snapshot,
)

pytestmark = pytest.mark.integration

SHARD = 3
OWNER = "relay-1"
# Ids no row has: past any id drawn here, the largest bigint, and ids no sequence draws.
UNKNOWN = [10**9, 2**63 - 1, 0, -1]
HOUR = dt.timedelta(hours=1)


async def parked(store: Store, ids: list[int], error: str = "MessageSizeTooLargeError") -> None:
    """Parks the rows as the relay does: a settle that charges them a non-retriable failure."""
    token = await store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    failures = [Failure(i, error, 0.0, park=True) for i in ids]
    assert (await settle(store, OWNER, {SHARD: token}, [], failures, False)).failed == len(ids)
    await store.lease_release(SHARD, OWNER, token)


async def retained(store: Store, ids: list[int]) -> None:
    """Publishes the rows as the relay does with retention=keep."""
    token = await store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    assert (await settle(store, OWNER, {SHARD: token}, ids, [], True)).published == len(ids)
    await store.lease_release(SHARD, OWNER, token)


async def parked_among_others(backend: Backend, store: Store) -> list[int]:
    """Key a: a parked row and a pending one behind it; key b: a parked row, a pending one
    and a retained (published, kept) one."""
    a, b = keys_on_shard(SHARD, 2)
    p1, later, p2, pending, kept = emit(backend, event(a), event(a), event(b), event(b), event(b))
    await retained(store, [kept])
    await parked(store, [p1, p2], "poison")
    return [p1, later, p2, pending, kept]


# ---------------------------------------------------------------------------- parked rows


async def test_parked_list_reads_parked_rows_only_and_each_filter_narrows(
    backend: Backend, store: Store
) -> None:
    a, b, c, d = keys_on_shard(SHARD, 4)
    p1, p2, p3, pending, kept = emit(
        backend,
        event(a, topic="orders"),
        event(b, topic="orders", event_type="OrderPaid"),
        event(c, topic="payments"),
        event(d),
        event(d),
    )
    await parked(store, [p1, p2], "MessageSizeTooLargeError: 2000 bytes")
    await parked(store, [p3], "UnknownTopicOrPartitionError")
    await retained(store, [kept])
    backdate(backend, [p1], 7200)
    event_ids = {int(r[0]): str(r[1]) for r in backend.fetch("outbox_rows")}

    every = await store.parked_list(RowFilter())
    assert ids_of(every) == [p1, p2, p3]
    first, second, _ = every
    assert (first.event_id, first.topic, first.key) == (event_ids[p1], "orders", a)
    assert (second.event_type, second.attempts) == ("OrderPaid", 1)
    assert second.last_error == "MessageSizeTooLargeError: 2000 bytes"
    assert 7190 < first.age_s < 7200 + 600
    assert 0 <= second.age_s < 600

    async def listed(**criteria: Any) -> list[int]:
        return ids_of(await store.parked_list(RowFilter(**criteria)))

    assert await listed(ids=[p3, p1, pending, kept, *UNKNOWN]) == [p1, p3]
    assert await listed(topic="payments") == [p3]
    assert await listed(key=b) == [p2]
    assert await listed(error="TooLarge") == [p1, p2]
    assert await listed(min_age_s=3600) == [p1]
    assert await listed(limit=2) == [p1, p2]
    assert await listed(limit=None) == [p1, p2, p3]
    assert await listed(topic="orders", error="2000", min_age_s=60) == [p1]


async def test_parked_list_takes_hostile_filters_as_plain_values(
    backend: Backend, store: Store
) -> None:
    """Filters are parameters, never SQL or patterns: quotes, wildcards and escape
    sequences match only rows that contain them; an empty id list names no row."""
    (a,) = keys_on_shard(SHARD, 1)
    (row,) = emit(backend, event(a, topic="orders"))
    await parked(store, [row], "boom 100%")
    before = snapshot(backend)

    for hostile in ("'; DROP TABLE outbox_events; --", "%", "_", "*", "\x1b[2J", "ö\u202e"):
        assert await store.parked_list(RowFilter(topic=hostile)) == []
        assert await store.parked_list(RowFilter(key=hostile)) == []
    assert await store.parked_list(RowFilter(error="_")) == []
    assert ids_of(await store.parked_list(RowFilter(error="%"))) == [row]  # the text itself
    assert await store.parked_list(RowFilter(ids=[])) == []
    assert await store.parked_list(RowFilter(ids=UNKNOWN)) == []
    assert await store.parked_list(RowFilter(min_age_s=10 * 365 * 86400)) == []
    assert snapshot(backend) == before


async def test_parked_retry_makes_exactly_the_parked_rows_pending_with_fresh_attempts(
    backend: Backend, store: Store
) -> None:
    p1, later, p2, pending, kept = await parked_among_others(backend, store)
    # A parked row holds its key's later rows back.
    assert ids_of(await claim(store, [SHARD], 10, "block_key")) == []

    changed = await store.parked_retry([p1, pending, kept, *UNKNOWN])
    assert changed == Changed([p1], sorted([pending, kept, *UNKNOWN]))
    states = row_states(backend)
    assert (states[p1].status, states[p1].attempts, states[p1].last_error) == (
        "pending",
        0,
        "poison",  # kept as history
    )
    assert states[p1].available_in_s <= 0
    assert (states[p2].status, states[p2].attempts) == ("parked", 1)
    assert states[kept].published
    assert ids_of(await claim(store, [SHARD], 10, "block_key")) == [p1, later]

    # Retried twice: the second time it is no longer parked, and nothing changes.
    before = snapshot(backend)
    assert await store.parked_retry([p1, p1]) == Changed([], [p1])
    assert await store.parked_retry([]) == Changed([], [])
    assert snapshot(backend) == before


async def test_parked_discard_deletes_exactly_the_parked_rows_and_unblocks_their_keys(
    backend: Backend, store: Store
) -> None:
    p1, later, p2, pending, kept = await parked_among_others(backend, store)

    changed = await store.parked_discard([pending, p1, kept, *UNKNOWN])
    assert changed == Changed([p1], sorted([pending, kept, *UNKNOWN]))
    states = row_states(backend)
    assert p1 not in states
    assert (states[p2].status, states[pending].status) == ("parked", "pending")
    assert states[kept].published
    assert ids_of(await claim(store, [SHARD], 10, "block_key")) == [later]

    before = snapshot(backend)
    assert await store.parked_discard([p1]) == Changed([], [p1])
    assert await store.parked_discard([]) == Changed([], [])
    assert snapshot(backend) == before
    # A retried row is pending: a discard of it is refused too.
    assert (await store.parked_retry([p2])).ids == [p2]
    assert await store.parked_discard([p2]) == Changed([], [p2])


# ---------------------------------------------------------------------------- replay


async def test_replay_list_reads_retained_rows_by_id_and_publish_time(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    old, new, parked_row, pending = emit(backend, event(a), event(a), event(b), event(b))
    await retained(store, [old])
    backend.rewind(2 * 3600)  # old was published two hours ago
    await retained(store, [new])
    await parked(store, [parked_row])
    now = dt.datetime.now(dt.UTC)

    async def listed(**criteria: Any) -> list[int]:
        return await store.replay_list(ReplayFilter(**criteria))

    assert await listed() == [old, new]
    assert await listed(ids=[new, parked_row, pending, *UNKNOWN]) == [new]
    assert await listed(since=now - HOUR) == [new]
    assert await listed(until=now - HOUR) == [old]
    assert await listed(since=now - 3 * HOUR, until=now + HOUR) == [old, new]
    assert await listed(since=now + HOUR) == []
    assert await listed(since=now + HOUR, until=now - HOUR) == []  # an empty window
    assert await listed(limit=1) == [old]
    assert await listed(ids=[]) == []
    # A time in another zone is the same instant.
    east = dt.timezone(dt.timedelta(hours=5))
    assert await listed(since=(now - HOUR).astimezone(east)) == [new]


async def test_replay_makes_exactly_the_retained_rows_pending_under_their_ids(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    k1, k2, parked_row, pending = emit(backend, event(a), event(a), event(b), event(b))
    event_ids = {int(r[0]): str(r[1]) for r in backend.fetch("outbox_rows")}
    await retained(store, [k1, k2])
    await parked(store, [parked_row])

    changed = await store.replay([k2, parked_row, pending, *UNKNOWN])
    assert changed == Changed([k2], sorted([parked_row, pending, *UNKNOWN]))
    states = row_states(backend)
    assert (states[k2].status, states[k2].published, states[k2].attempts) == ("pending", False, 0)
    assert states[k1].published
    assert states[parked_row].status == "parked"
    (again,) = [r for r in await claim(store, [SHARD], 10, "skip") if r.id == k2]
    assert again.event_id == event_ids[k2]
    assert await store.replay_list(ReplayFilter()) == [k1]

    # Replayed twice: the second time the row is pending, not retained, and nothing changes.
    before = snapshot(backend)
    assert await store.replay([k2]) == Changed([], [k2])
    assert await store.replay([]) == Changed([], [])
    assert snapshot(backend) == before
