"""retention=keep on Postgres: a settle moves acked rows into outbox_published, partitioned
by publish time; the purge round drops whole partitions past the retention (no dead tuples
left), creates the next ones ahead, never queues for the lock a settle holds, and settles
go on beside it. SQLite keeps its rows in outbox_events (the same purge round, nothing to
rotate)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

import psycopg
import pytest
from pydantic import ValidationError

from outbox_core.supervisor import Supervisor
from relay.control.purge import Purger, PurgeSettings
from relay.ops import admin
from relay.store import Rotated, Rotation, Store
from tests.support.db import Backend
from tests.support.stores import (
    claim,
    emit,
    event,
    ids_of,
    keys_on_shard,
    row_states,
    settle,
)
from tests.support.waits import until

pytestmark = pytest.mark.integration

T = TypeVar("T")

SHARD = 2
OWNER = "history-test"
# Partitions of one second, made three seconds ahead: a test crosses a few boundaries in
# seconds. The lock timeout is short: a rotation that cannot have its lock gives up.
FAST = Rotation(retention_s=3600.0, width_s=1, ahead_s=3, lock_timeout_ms=100)


async def publish(store: Store, backend: Backend, count: int, keep: bool = True) -> list[int]:
    """Emits `count` events on SHARD, claims and settles them; returns their ids."""
    keys = keys_on_shard(SHARD, 3)
    ids = emit(backend, *(event(keys[i % 3]) for i in range(count)))
    token = await store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    rows = await claim(store, [SHARD], 1000, "block_key")
    assert ids_of(rows) == ids
    done = await settle(store, OWNER, {SHARD: token}, ids, [], keep)
    assert done.published == count
    await store.lease_release(SHARD, OWNER, token)
    return ids


async def until_rows_land_in_a_partition(store: Store, backend: Backend) -> None:
    """Waits (rotating) until the time is inside a partition the rotation made."""
    for _ in range(100):
        await store.rotate_published(FAST)
        probe = await publish(store, backend, 1)
        placed = {p for i, _, p in backend.fetch("published_rows") if i in probe}
        if placed != {"outbox_published_default"}:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no partition ever covered the time")


def dead_tuples(backend: Backend, name: str) -> int:
    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute(backend.sql("stats_flush"))
        row = conn.execute(backend.sql(name)).fetchone()
    assert row is not None
    return int(row[0])


async def test_keep_moves_acked_rows_into_the_history_with_their_ids(
    pg: Backend, pg_store: Store
) -> None:
    ids = await publish(pg_store, pg, 5)
    events = {int(r[0]) for r in pg.fetch("outbox_rows")}
    assert not events & set(ids), "a kept row stayed in outbox_events"
    history = pg.fetch("published_rows")
    assert [r[0] for r in history] == ids
    assert all(s.published for s in row_states(pg).values())
    # retention=delete still deletes: nothing reaches the history.
    deleted = await publish(pg_store, pg, 3, keep=False)
    assert not {r[0] for r in pg.fetch("published_rows")} & set(deleted)
    assert not {int(r[0]) for r in pg.fetch("outbox_rows")} & set(deleted)


async def test_a_replayed_row_goes_back_with_its_id_and_event_id_and_is_claimed(
    pg: Backend, pg_store: Store
) -> None:
    ids = await publish(pg_store, pg, 3)
    event_ids = {i: e for i, e, _ in pg.fetch("published_rows")}
    assert admin.replay_list(pg.url) == ids
    changed = admin.replay_ids(pg.url, [ids[1]])
    assert changed.ids == [ids[1]]
    assert {int(r[0]): str(r[1]) for r in pg.fetch("outbox_rows")} == {ids[1]: event_ids[ids[1]]}
    assert [r[0] for r in pg.fetch("published_rows")] == [ids[0], ids[2]]
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [ids[1]]
    assert admin.replay_ids(pg.url, [ids[1]]).missing == [ids[1]]  # pending, not retained


async def test_rotation_drops_whole_partitions_and_leaves_no_dead_tuples(
    pg: Backend, pg_store: Store
) -> None:
    # Settled before any rotation (a relay from before the purge round made partitions):
    # the DEFAULT partition has them, and no partition is made over them.
    early = await publish(pg_store, pg, 3)
    first = await pg_store.rotate_published(FAST)
    assert first.created >= 3
    assert first.dropped == 0
    assert {p for i, _, p in pg.fetch("published_rows") if i in early} == {
        "outbox_published_default"
    }
    await until_rows_land_in_a_partition(pg_store, pg)
    ids = await publish(pg_store, pg, 50)
    parts = {p for i, _, p in pg.fetch("published_rows") if i in ids}
    assert parts
    assert "outbox_published_default" not in parts
    # Retention 0: every partition whose upper bound has passed goes, once time passes it.
    gone: set[str] = set()
    for _ in range(100):
        await pg_store.rotate_published(
            Rotation(0.0, FAST.width_s, FAST.ahead_s, FAST.lock_timeout_ms)
        )
        left = {r[0] for r in pg.fetch("published_partitions")}
        gone = parts - left
        if gone == parts:
            break
        await asyncio.sleep(0.2)
    assert gone == parts
    assert not {r[0] for r in pg.fetch("published_rows")} & set(ids)
    assert "outbox_published_default" in {r[0] for r in pg.fetch("published_partitions")}
    assert dead_tuples(pg, "published_dead_tuples") == 0
    # The measure sees dead tuples where rows are deleted: the DEFAULT partition holds the
    # rows settled before the first rotation, deleted in batches once old enough.
    pg.execute("published_default_age")
    assert await pg_store.purge(3600.0, 3600.0, 1000) >= 1
    for _ in range(50):
        if dead_tuples(pg, "published_default_dead_tuples") > 0:
            break
        await asyncio.sleep(0.1)
    assert dead_tuples(pg, "published_default_dead_tuples") > 0


async def test_rows_settled_after_the_first_rotation_have_a_partition(
    pg: Backend, pg_store: Store
) -> None:
    """The first round's partitions start where the migration's ends, or a minute before
    now at the latest, so nothing lands in the DEFAULT partition: every partition made
    later is checked against each row it holds, under a lock every settle waits for (half
    a second, after a minute's drain had gone there)."""
    await pg_store.rotate_published(PurgeSettings().rotation)
    ids = await publish(pg_store, pg, 5)
    placed = {p for i, _, p in pg.fetch("published_rows") if i in ids}
    assert placed
    assert "outbox_published_default" not in placed


async def test_a_rotation_waiting_for_a_lock_gives_up_and_settles_go_on(
    pg: Backend, pg_store: Store
) -> None:
    await pg_store.rotate_published(FAST)
    await until_rows_land_in_a_partition(pg_store, pg)
    with psycopg.connect(pg.target) as holder:
        holder.execute(pg.sql("published_hold")).fetchall()  # a reader's lock, held
        # Every partition must go (retention 0 once their time has passed) and new ones be
        # made: each DDL finds the lock held and is skipped, not queued.
        await asyncio.sleep(1.2)
        blocked = await pg_store.rotate_published(Rotation(0.0, 1, 3, 100))
        assert blocked.skipped >= 1
        assert blocked.dropped == 0
        # A settle beside the held lock is not stuck behind the rotation that gave up.
        ids = await publish(pg_store, pg, 5)
        holder.rollback()
    assert {r[0] for r in pg.fetch("published_rows")} >= set(ids)
    after = await pg_store.rotate_published(Rotation(0.0, 1, 3, 100))
    assert after.dropped >= 1


@pytest.mark.parametrize("retention_s", [3600.0, 0.0], ids=["create", "drop"])
async def test_two_replicas_rotating_at_once_neither_waits_nor_fails(
    pg: Backend, pg_store: Store, retention_s: float
) -> None:
    """Every active replica runs the purge round. While one replica's rotation holds the
    history's lock (it made or dropped partitions, not committed yet), the other's skips
    them at once instead of queueing; once the first commits, the other's next try finds
    the work done and fails nothing."""
    await pg_store.rotate_published(FAST)
    await until_rows_land_in_a_partition(pg_store, pg)
    await asyncio.sleep(1.2)  # with retention 0, at least one partition is past it
    params = {"retention_s": retention_s}
    with psycopg.connect(pg.target) as first, psycopg.connect(pg.target) as second:
        made = first.execute(pg.sql("published_rotate_patient"), params).fetchone()
        assert made is not None
        assert made[0] + made[1] >= 1  # it created or dropped, and holds the locks

        def rotate_second() -> tuple[int, int, int]:
            row = second.execute(pg.sql("published_rotate_patient"), params).fetchone()
            second.commit()
            assert row is not None
            return (int(row[0]), int(row[1]), int(row[2]))

        beside = await until_rotated_or_waiting(pg, asyncio.to_thread(rotate_second))
        first.commit()
        assert beside is not None, "the second rotation waited for the first's lock"
        assert beside[:2] == (0, 0)
        assert beside[2] >= 1
        again = await asyncio.to_thread(rotate_second)
        assert again[2] == 0  # nothing skipped, no error


async def until_rotated_or_waiting(pg: Backend, rotation: Awaitable[T]) -> T | None:
    """The rotation's result, or None as soon as a session of the database waits for a
    lock (the rotation queued behind a holder), whichever comes first."""
    task = asyncio.ensure_future(rotation)
    await until(lambda: task.done() or pg.lock_waiters() >= 1, 20, "the rotation or a waiter")
    if task.done():
        return task.result()
    return None


async def test_a_settle_in_flight_makes_the_rotation_skip_at_once(
    pg: Backend, pg_store: Store
) -> None:
    """A settle holds ROW EXCLUSIVE on the history until it commits, and a bulk settle of a
    draining backlog runs for 100 ms and more. A rotation that queued for the lock would
    hold every later settle behind it meanwhile (500 ms stalls while a backlog drained),
    so it does not queue: it skips, whatever its lock timeout."""
    await pg_store.rotate_published(FAST)
    await asyncio.sleep(1.2)  # a partition to make
    with psycopg.connect(pg.target) as settle_in_flight:
        settle_in_flight.execute(pg.sql("published_settle_lock"))
        rotated = await until_rotated_or_waiting(
            pg, pg_store.rotate_published(Rotation(0.0, 1, 3, 20_000))
        )
        settle_in_flight.rollback()
    assert rotated is not None, "the rotation queued behind the settle"
    assert (rotated.created, rotated.dropped) == (0, 0)
    assert rotated.skipped >= 1


async def test_the_purge_round_tries_a_skipped_rotation_again(
    pg: Backend, pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation skipped because a settle held the lock is tried again within the round
    (purge_lock_timeout_s), so a steady stream of settles does not leave the partitions
    to later rounds forever; past that time the round goes on to its batches."""
    await pg_store.rotate_published(FAST)
    await asyncio.sleep(1.2)  # a partition to make
    before = {r[0] for r in pg.fetch("published_partitions")}
    rotate, tries = pg_store.rotate_published, 0

    async def counted(rotation: Rotation) -> Rotated:
        nonlocal tries
        tries += 1
        return await rotate(rotation)

    monkeypatch.setattr(pg_store, "rotate_published", counted)
    sup = Supervisor(logging.getLogger("test"))
    patient = Purger(
        PurgeSettings(retention_period_s=0.0, purge_lock_timeout_s=60.0),
        store=pg_store,
        supervisor=sup,
    )
    with psycopg.connect(pg.target) as settle_in_flight:
        settle_in_flight.execute(pg.sql("published_settle_lock"))
        brief = Purger(
            PurgeSettings(retention_period_s=0.0, purge_lock_timeout_s=0.05),
            store=pg_store,
            supervisor=sup,
        )
        await brief.run_once()  # gives up after its 50 ms, and ends its round
        assert tries >= 1
        assert {r[0] for r in pg.fetch("published_partitions")} == before
        round_ = asyncio.create_task(patient.run_once())
        start = tries
        await until(lambda: tries >= start + 2, 20, "the round trying again")
        settle_in_flight.rollback()
        await round_
    assert {r[0] for r in pg.fetch("published_partitions")} != before  # in that round


async def test_settles_go_on_while_partitions_rotate(pg: Backend, pg_store: Store) -> None:
    """Rotations every few milliseconds, dropping and creating one-second partitions,
    beside settles: every settle succeeds, every row is in the history or dropped with
    its whole partition, none is left in outbox_events."""
    stop = asyncio.Event()
    rotations = 0

    async def rotate() -> None:
        nonlocal rotations
        while not stop.is_set():
            await pg_store.rotate_published(Rotation(1.0, 1, 2, 50))
            rotations += 1
            await asyncio.sleep(0.01)

    rotator = asyncio.create_task(rotate())
    settled: list[int] = []
    try:
        for _ in range(40):
            settled += await publish(pg_store, pg, 10)
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await rotator
    assert rotations > 1
    assert not {int(r[0]) for r in pg.fetch("outbox_rows")} & set(settled)


async def test_the_purge_round_rotates_under_keep_only(pg: Backend, pg_store: Store) -> None:
    sup = Supervisor(logging.getLogger("test"))
    keep = Purger(
        PurgeSettings(retention_period_s=8.0, purge_interval_s=1.0), store=pg_store, supervisor=sup
    )
    assert keep.settings.rotation == Rotation(8.0, 1, 4, 500)
    await keep.run_once()
    made = {r[0] for r in pg.fetch("published_partitions")} - {"outbox_published_default"}
    assert made
    delete = Purger(PurgeSettings(retention="delete"), store=pg_store, supervisor=sup)
    await delete.run_once()
    assert {r[0] for r in pg.fetch("published_partitions")} - {"outbox_published_default"} == made


async def test_sqlite_keeps_its_rows_in_outbox_events(backend: Backend, store: Store) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("the Postgres side is the rest of this file")
    ids = await publish(store, backend, 3)
    assert await store.rotate_published(FAST) == Rotated(0, 0, 0)
    states = row_states(backend)
    assert sorted(states) == ids
    assert all(s.published for s in states.values())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retention_period_s", -1.0),
        ("retention_period_s", float("nan")),
        ("retention_period_s", float("inf")),
        ("retention", "kept"),
        ("purge_lock_timeout_s", 0.0),
        ("purge_lock_timeout_s", 3600.0),
        ("retention_move_max_bytes", -1),
        ("retention_move_max_bytes", "64k"),
    ],
)
def test_a_bad_retention_is_refused_at_config_load(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        PurgeSettings.model_validate({field: value})


async def test_a_failed_rotation_leaves_the_batches_of_its_round_to_run(
    pg: Backend, pg_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await publish(pg_store, pg, 4)  # no partition yet: into the DEFAULT one
    pg.execute("published_rotate_drop")
    purger = Purger(
        PurgeSettings(retention_period_s=0.0),
        store=pg_store,
        supervisor=Supervisor(logging.getLogger("test")),
    )
    with caplog.at_level(logging.WARNING, logger="relay.purge"):
        assert await purger.run_once() == 4
    assert "partition rotation failed" in caplog.text
    assert pg.fetch("published_rows") == []


async def test_rows_an_older_relay_marked_in_place_are_replayed_and_purged(
    pg: Backend, pg_store: Store
) -> None:
    """A relay from before migration 0005 marks kept rows in outbox_events: replay lists
    and replays them there, and the purge deletes them after the retention."""
    keys = keys_on_shard(SHARD, 1)
    ids = emit(pg, *(event(keys[0]) for _ in range(3)))
    pg.execute("outbox_mark_published_below", {"below": ids[-1] + 1})
    assert admin.replay_list(pg.url) == ids
    assert admin.replay_ids(pg.url, [ids[0]]).ids == [ids[0]]
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [ids[0]]
    assert await pg_store.purge(0.0, 3600.0, 100) == 2
    assert sorted(row_states(pg)) == [ids[0]]


async def test_keep_marks_large_payloads_in_place_and_moves_the_rest(
    pg: Backend, pg_store: Store
) -> None:
    """A payload above move_max_bytes is not copied into the history: its row is marked
    published in outbox_events, where claims never see it again, replay finds and replays
    it, and the purge deletes it after the retention. The others move as before."""
    keys = keys_on_shard(SHARD, 2)
    big = {"blob": "x" * 150_000}  # out of line (TOAST), above the default 64 KiB
    ids = emit(pg, event(keys[0]), event(keys[0], payload=big), event(keys[1], payload=big))
    token = await pg_store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == ids
    done = await settle(pg_store, OWNER, {SHARD: token}, ids, [], True)
    assert done.published == 3
    assert [r[0] for r in pg.fetch("published_rows")] == [ids[0]]
    marked = {i: s.published for i, s in row_states(pg).items() if i != ids[0]}
    assert marked == {ids[1]: True, ids[2]: True}
    assert {int(r[0]) for r in pg.fetch("outbox_rows")} == {ids[1], ids[2]}
    assert await claim(pg_store, [SHARD], 100, "block_key") == []
    # A later row of the key goes out: the marked row holds nothing back.
    later = emit(pg, event(keys[0]))
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == later
    assert admin.replay_list(pg.url) == ids
    assert admin.replay_ids(pg.url, [ids[1]]).ids == [ids[1]]
    assert ids_of(await claim(pg_store, [SHARD], 100, "block_key")) == [ids[1], *later]
    # ids[2] marked, ids[0] in the DEFAULT partition (no rotation ran); ids[1] is pending.
    assert await pg_store.purge(0.0, 3600.0, 100) == 2
    assert sorted(row_states(pg)) == [ids[1], *later]


@pytest.mark.parametrize(("limit", "in_history"), [(0, []), (10**9, [0, 1])])
async def test_move_max_bytes_decides_where_each_row_goes(
    pg: Backend, pg_store: Store, limit: int, in_history: list[int]
) -> None:
    keys = keys_on_shard(SHARD, 1)
    ids = emit(pg, event(keys[0]), event(keys[0], payload={"blob": "y" * 100_000}))
    token = await pg_store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    await claim(pg_store, [SHARD], 100, "block_key")
    done = await settle(pg_store, OWNER, {SHARD: token}, ids, [], True, move_max_bytes=limit)
    assert done.published == 2
    assert [r[0] for r in pg.fetch("published_rows")] == [ids[i] for i in in_history]
    assert all(s.published for s in row_states(pg).values())
