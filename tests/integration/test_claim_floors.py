"""Claim floors (relay/control/floors.py) on real Postgres: a floor never passes a row a
claim could still take (an open writer, a prepared transaction, a replay), and an old
read-only snapshot does not hold it back. The horizon look names what holds vacuum back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from outbox_core.queries import query
from outbox_core.supervisor import Supervisor
from producer_lib import Outbox
from relay.control.floors import RESCAN_SLICES, ClaimFloors, FloorSettings
from relay.control.horizon import Horizon, HorizonSettings
from relay.ops.observer import RelayObserver
from relay.store import Store
from relay.store.plans import EXACT
from tests.support.db import Backend, postgres_backend
from tests.support.stores import (
    SHARD_COUNT,
    claim,
    emit,
    event,
    ids_of,
    keys_on_shard,
    settle,
)

pytestmark = pytest.mark.integration

SHARD = 3
OWNER = "relay-1"


@pytest.fixture
def floors(pg_store: Store) -> ClaimFloors:
    sup = Supervisor(logging.getLogger("test"))
    return ClaimFloors(FloorSettings(), shard_count=SHARD_COUNT, store=pg_store, supervisor=sup)


@pytest.fixture
def open_writer(pg: Backend) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg.target)
    try:
        yield conn
    finally:
        conn.close()


async def rounds(floors: ClaimFloors, n: int = 3) -> dict[int, int]:
    for _ in range(n):
        await floors.run_once()
    return floors.floors


async def publish_all(store: Store, shard: int = SHARD) -> list[int]:
    token = await store.lease_acquire(shard, OWNER, 30)
    assert token is not None
    rows = await claim(store, [shard], 1000, "block_key")
    await settle(store, OWNER, {shard: token}, ids_of(rows), [], True)
    await store.lease_release(shard, OWNER, token)
    return ids_of(rows)


def emit_open(conn: psycopg.Connection[Any], key: str) -> int:
    """Emits in conn's transaction, left open; returns the row's id."""
    (event_id,) = Outbox(shard_count=SHARD_COUNT).emit_batch(conn, [event(key)])
    row = conn.execute(
        postgres_backend("x").sql("outbox_id_of_event"), {"event_id": event_id}
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_floor_never_passes_a_row_whose_writer_is_still_open(
    pg: Backend, pg_store: Store, floors: ClaimFloors, open_writer: psycopg.Connection[Any]
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    slow = emit_open(open_writer, a)  # the smaller id, committed last
    fast = emit(pg, event(b), event(b), event(b))
    assert slow < min(fast)
    assert await publish_all(pg_store) == fast
    assert (await rounds(floors))[SHARD] < slow
    open_writer.commit()
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [slow]
    await rounds(floors)
    # The floor stops below the one unpublished row, however many rows above it are done.
    assert floors.floors[SHARD] == slow - 1
    assert await publish_all(pg_store) == [slow]
    assert (await rounds(floors))[SHARD] == max(fast)


async def test_a_rolled_back_writer_lets_the_floor_pass(
    pg: Backend, pg_store: Store, floors: ClaimFloors, open_writer: psycopg.Connection[Any]
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    emit_open(open_writer, a)
    fast = emit(pg, event(b))
    await publish_all(pg_store)
    assert (await rounds(floors))[SHARD] < min(fast) - 1
    open_writer.rollback()
    assert (await rounds(floors))[SHARD] == max(fast)


async def test_an_old_read_only_snapshot_does_not_hold_the_floor(
    pg: Backend, pg_store: Store, floors: ClaimFloors
) -> None:
    (a,) = keys_on_shard(SHARD, 1)
    with psycopg.connect(pg.target) as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute(pg.sql("snapshot_open")).fetchall()
        done = emit(pg, *(event(a) for _ in range(20)))
        await publish_all(pg_store)
        assert (await rounds(floors))[SHARD] == max(done)
        # Rows above the floor are still claimed, in id order.
        later = emit(pg, event(a), event(a))
        assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == later
        holder.rollback()


async def test_a_running_vacuum_does_not_hold_the_floor(
    pg: Backend, pg_store: Store, floors: ClaimFloors, open_writer: psycopg.Connection[Any]
) -> None:
    """VACUUM and ANALYZE insert nothing: their lock on the table is no writer's."""
    (a,) = keys_on_shard(SHARD, 1)
    open_writer.execute(pg.sql("outbox_lock_as_vacuum"))
    done = emit(pg, event(a), event(a))
    await publish_all(pg_store)
    assert (await rounds(floors))[SHARD] == max(done)
    open_writer.rollback()


async def test_a_prepared_transaction_holds_the_floor(
    pg: Backend, pg_store: Store, floors: ClaimFloors, open_writer: psycopg.Connection[Any]
) -> None:
    if int(pg.fetch("server_setting", {"name": "max_prepared_transactions"})[0][0]) == 0:
        pytest.skip("the server allows no prepared transactions (max_prepared_transactions=0)")
    a, b = keys_on_shard(SHARD, 2)
    prepared = emit_open(open_writer, a)
    open_writer.execute(pg.sql("transaction_prepare"))
    open_writer.commit()
    open_writer.autocommit = True
    try:
        emit(pg, event(b))
        await publish_all(pg_store)
        assert (await rounds(floors))[SHARD] < prepared
    finally:
        open_writer.execute(pg.sql("transaction_commit_prepared"))
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [prepared]


async def sweep(floors: ClaimFloors) -> None:
    """One whole sweep of the rescan below the floors."""
    for _ in range(RESCAN_SLICES):
        await floors.rescan_once()


async def test_a_replayed_row_below_the_floor_goes_out_after_a_rescan(
    pg: Backend, pg_store: Store, floors: ClaimFloors
) -> None:
    (a,) = keys_on_shard(SHARD, 1)
    done = emit(pg, *(event(a) for _ in range(5)))
    await publish_all(pg_store)
    assert (await rounds(floors))[SHARD] == max(done)
    with psycopg.connect(pg.target, autocommit=True) as conn:
        conn.execute(query("postgres", "outbox_replay"), {"ids": [done[1]]})
    await sweep(floors)
    assert floors.floors[SHARD] == done[1] - 1
    # The rounds after it keep the floor below the replayed row until it is published.
    await rounds(floors)
    assert floors.floors[SHARD] == done[1] - 1
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [done[1]]
    await publish_all(pg_store)
    assert (await rounds(floors))[SHARD] == max(done)


async def test_a_rescan_slice_during_a_round_keeps_the_floor_it_lowered(
    pg: Backend, pg_store: Store, floors: ClaimFloors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rescan runs beside the rounds: a round that read the floors before a slice
    lowered one must not raise it back over the replayed row when it ends."""
    (a,) = keys_on_shard(SHARD, 1)
    done = emit(pg, *(event(a) for _ in range(5)))
    await publish_all(pg_store)
    assert (await rounds(floors))[SHARD] == max(done)
    emit(pg, event(a))  # a mark for the next round to apply
    await publish_all(pg_store)
    await floors.run_once()
    with psycopg.connect(pg.target, autocommit=True) as conn:
        conn.execute(query("postgres", "outbox_replay"), {"ids": [done[0]]})
    store_lowest = pg_store.floor_lowest

    async def lowest_with_a_sweep_between(base: Mapping[int, int]) -> dict[int, int | None]:
        found = await store_lowest(base)
        await sweep(floors)  # lands while the round waits for its statement
        return found

    # The real statement; the sweep is only timed to land inside the round.
    monkeypatch.setattr(pg_store, "floor_lowest", lowest_with_a_sweep_between)
    assert await floors.run_once()
    assert floors.floors[SHARD] == done[0] - 1
    monkeypatch.undo()
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [done[0]]


def held_buffers(url: str, name: str, params: dict[str, Any]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        (doc,) = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("postgres", name), params
        ).fetchone() or (None,)
    plan = doc[0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


async def test_the_backlog_gauges_walk_only_above_the_floors_under_an_old_snapshot(
    pg: Backend, pg_store: Store, floors: ClaimFloors
) -> None:
    """An old snapshot keeps every published row's index entry; the backlog gauges count
    above the floors, so what they read stays flat while those grow (without floors they
    read every one of them)."""

    def buffers(floored: bool) -> int:
        by_shard = floors.floors if floored else dict.fromkeys(range(SHARD_COUNT), 0)
        params = {
            "top": 10,
            "shard_count": SHARD_COUNT,
            "shards": list(by_shard),
            "floors": list(by_shard.values()),
            "count_limit": EXACT,
        }
        return held_buffers(pg.target, "outbox_backlog_by_tenant", params) + held_buffers(
            pg.target, "outbox_backlog", params
        )

    def publish(rows: int) -> None:
        pg.execute("outbox_fill", {"rows": rows})
        top = int(pg.fetch("outbox_id_quantile", {"q": 1.0})[0][0])
        pg.execute("outbox_mark_published_below", {"below": top + 1})
        # Statistics that know the table: a plain join then hashed every shard's entries.
        pg.execute("outbox_analyze")

    with psycopg.connect(pg.target) as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute(pg.sql("snapshot_open")).fetchall()
        publish(2_000)
        await rounds(floors)
        first, first_unfloored = buffers(True), buffers(False)
        publish(30_000)
        await rounds(floors)
        later, later_unfloored = buffers(True), buffers(False)
        holder.rollback()
    assert later_unfloored > first_unfloored + 5_000  # the dead entries are there
    assert later - first < (later_unfloored - first_unfloored) / 100, (first, later)
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == []


async def test_rescan_bounds_of_any_value_are_only_compared(pg_store: Store) -> None:
    big = 2**63 - 1
    assert await pg_store.floor_unpublished_between(-big - 1, {SHARD: big}) == {SHARD: None}
    assert await pg_store.floor_unpublished_between(big, {SHARD: -big - 1}) == {SHARD: None}


async def test_a_cached_sequence_proves_nothing_and_moves_no_floor(
    pg: Backend, pg_store: Store, floors: ClaimFloors
) -> None:
    (a,) = keys_on_shard(SHARD, 1)
    pg.execute("outbox_sequence_cache")
    emit(pg, event(a))
    await publish_all(pg_store)
    assert await pg_store.floor_last_id() is None
    assert (await rounds(floors))[SHARD] == 0


async def test_writer_lists_of_any_text_are_only_compared(pg_store: Store) -> None:
    hostile = ["'); DROP TABLE outbox_events; --", "1/1", "", "-1/0", "\\x00"]
    assert await pg_store.floor_writers_left(hostile) == 0
    assert await pg_store.floor_lowest({SHARD: -(2**63)}) == {SHARD: None}


def test_floor_settings_refuse_nonsense() -> None:
    for bad in ({"interval_s": 0}, {"interval_s": -1}, {"rescan_s": 0}):
        with pytest.raises(ValidationError):
            FloorSettings(**bad)
    for bad in ({"interval_s": 0}, {"warn_age_s": -5}, {"warn_xid_age": 0}):
        with pytest.raises(ValidationError):
            HorizonSettings(**bad)


async def test_the_horizon_names_an_old_idle_transaction(
    pg: Backend, pg_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sup = Supervisor(logging.getLogger("test"))
    observer = RelayObserver()
    horizon = Horizon(
        HorizonSettings(warn_age_s=0.1), store=pg_store, observer=observer, supervisor=sup
    )
    with psycopg.connect(pg.target, application_name="nightly-report") as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute(pg.sql("snapshot_open")).fetchall()
        pid = holder.info.backend_pid
        await asyncio.sleep(0.3)
        with caplog.at_level(logging.WARNING, logger="relay.horizon"):
            holders = await horizon.run_once()
        holder.rollback()
    snapshot = next(h for h in holders if h.kind == "snapshot")
    assert (snapshot.pid, snapshot.application_name) == (pid, "nightly-report")
    assert snapshot.state == "idle in transaction"
    assert snapshot.age_s is not None
    assert snapshot.age_s >= 0.3
    warned = [r for r in caplog.records if getattr(r, "pid", None) == pid]
    assert warned
    assert warned[0].application_name == "nightly-report"  # type: ignore[attr-defined]
    sample = observer.metrics.registry.get_sample_value
    assert (sample("outbox_db_horizon_age_seconds", {"kind": "snapshot"}) or 0) >= 0.3
    assert sample("outbox_db_horizon_age_seconds", {"kind": "prepared_xact"}) == 0
