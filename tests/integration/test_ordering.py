"""Per-key order: ids of one key follow commit order, however writers interleave."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from typing import Any

import pymysql
import pytest

from outbox_core.queries import query
from outbox_core.sharding import KEY_LOCK_SLOTS, key_lock_slot
from producer_lib import Event, Outbox
from relay.store.protocol import UNBOUNDED_BYTES
from tests.support.db import Backend, mariadb_backend, postgres_backend
from tests.support.transactions import RAW_SYNC, async_tx

pytestmark = pytest.mark.integration

WRITERS = 24


def _race(
    backend: Backend,
    outbox: Outbox,
    writers: int,
    seed: int,
    kind: str = "driver",
    rollbacks: float = 0.0,
) -> list[str]:
    """Writers emit for one key, sleep a random while holding the transaction, commit (or,
    a `rollbacks` share of them, roll back).

    Returns the keys' labels in the order their commits returned (SQLite, MariaDB) —
    Postgres tests read the true commit order from pg_xact_commit_timestamp instead.
    """
    rng = random.Random(seed)
    sleeps = [rng.uniform(0.0, 0.03) for _ in range(writers)]
    gives_up = [rng.random() < rollbacks for _ in range(writers)]
    start = threading.Barrier(writers)
    committed: list[str] = []
    guard = threading.Lock()
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            conn = RAW_SYNC[kind](backend)
            try:
                start.wait()
                outbox.emit(conn, topic="orders", key="hot-key", event_type="E", payload={"w": i})
                time.sleep(sleeps[i])
                with guard:
                    if gives_up[i]:
                        conn.rollback()
                    else:
                        conn.commit()
                        committed.append(str(i))
            finally:
                conn.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return committed


def _id_order_matches_commit_order(backend: Backend) -> bool:
    by_commit = [row[0] for row in backend.fetch("outbox_commit_order")]
    return by_commit == sorted(by_commit)


@pytest.mark.parametrize("kind", ["driver", "psycopg2"])
def test_postgres_ids_follow_commit_order_with_per_key_lock(pg_url: str, kind: str) -> None:
    backend = postgres_backend(pg_url)
    backend.migrate()
    for seed in range(3):
        _race(backend, Outbox(), WRITERS, seed, kind)
    assert backend.scalar("outbox_count") == 3 * WRITERS
    assert _id_order_matches_commit_order(backend)


def _committed_by_id(backend: Backend) -> list[str]:
    return [str(json.loads(bytes(r[6]))["w"]) for r in backend.fetch("outbox_rows")]


@pytest.mark.parametrize("kind", ["driver", "mysqldb"])
def test_mariadb_ids_follow_commit_order_with_per_key_lock(mariadb_url: str, kind: str) -> None:
    """InnoDB draws AUTO_INCREMENT ids at insert: the key's slot lock, held from before the
    insert to commit, makes the ids of a key's committed rows follow commit order, with
    rolled-back writers among them (PyMySQL's writers and mysqlclient's)."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    committed: list[str] = []
    for seed in range(3):
        committed += _race(backend, Outbox(), WRITERS, seed, kind, rollbacks=0.25)
    assert _committed_by_id(backend) == committed
    assert len(committed) > 2 * WRITERS  # most committed, some rolled back


@pytest.mark.parametrize("kind", ["driver", "mysqldb"])
def test_mariadb_without_the_lock_order_breaks(mariadb_url: str, kind: str) -> None:
    """The control: the same race without the lock does reorder, so the test above can fail."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    committed: list[str] = []
    for seed in range(10):
        committed += _race(backend, Outbox(per_key_lock=False), WRITERS, seed, kind)
        if _committed_by_id(backend) != committed:
            return
    pytest.fail("10 unlocked races never committed out of id order; the race is not a race")


def test_mariadb_writers_of_other_keys_do_not_wait(mariadb_url: str) -> None:
    """A key's slot lock is a record lock, no gap lock, at MariaDB's default REPEATABLE
    READ: while a batch holds its keys' slots, every other slot, the neighbours included,
    is free at once (NOWAIT), and the batch's own slots are not."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    keys = [f"k{i}" for i in range(20)]
    held = {key_lock_slot("orders", k) for k in keys}
    neighbours = {s + d for s in held for d in (-1, 1)} - held
    holder, other = backend.connect(), backend.connect()
    try:
        Outbox().emit_batch(holder, [Event("orders", k, "E", {}) for k in keys])
        with other.cursor() as cur:
            for slot in sorted(neighbours & set(range(KEY_LOCK_SLOTS))):
                cur.execute(backend.sql("key_lock_take"), {"slot": slot})
            for slot in held:
                with pytest.raises(pymysql.err.OperationalError):
                    cur.execute(backend.sql("key_lock_take"), {"slot": slot})
            other.rollback()
        Outbox().emit(other, topic="orders", key="not-held", event_type="E", payload={})
        other.commit()
        holder.commit()
    finally:
        holder.close()
        other.close()
    assert backend.scalar("outbox_count") == len(keys) + 1


def test_mariadb_batches_of_overlapping_keys_never_deadlock(mariadb_url: str) -> None:
    """Batches lock their slots in ascending order: threads emitting random, overlapping
    key sets queue on each other but never deadlock (error 1213)."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    keys = [f"k{i}" for i in range(40)]
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def write(seed: int) -> None:
        rng = random.Random(seed)
        try:
            conn = backend.connect()
            try:
                start.wait()
                for _ in range(8):
                    batch = rng.sample(keys, 12)
                    Outbox().emit_batch(conn, [Event("orders", k, "E", {}) for k in batch])
                    time.sleep(rng.uniform(0.0, 0.01))
                    conn.commit()
            finally:
                conn.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert backend.scalar("outbox_count") == 6 * 8 * 12


async def _race_async(backend: Backend, outbox: Outbox, writers: int, seed: int, kind: str) -> None:
    """_race with emit_async: writers on one event loop, each in its own transaction."""
    rng = random.Random(seed)
    sleeps = [rng.uniform(0.0, 0.03) for _ in range(writers)]
    start = asyncio.Barrier(writers)

    async def write(i: int) -> None:
        async with async_tx(backend, kind) as conn:
            await start.wait()
            await outbox.emit_async(
                conn, topic="orders", key="hot-key", event_type="E", payload={"w": i}
            )
            await asyncio.sleep(sleeps[i])

    async with asyncio.TaskGroup() as group:
        for i in range(writers):
            group.create_task(write(i))


@pytest.mark.parametrize("kind", ["asyncpg", "sa_asyncpg_session", "psycopg_async"])
async def test_postgres_ids_follow_commit_order_with_per_key_lock_async(
    pg_url: str, kind: str
) -> None:
    backend = postgres_backend(pg_url)
    backend.migrate()
    for seed in range(3):
        await _race_async(backend, Outbox(), WRITERS, seed, kind)
    assert backend.scalar("outbox_count") == 3 * WRITERS
    assert _id_order_matches_commit_order(backend)


def test_postgres_without_the_lock_order_breaks(pg_url: str) -> None:
    """The control: the same race without the lock does reorder, so the test above can fail."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    for seed in range(10):
        _race(backend, Outbox(per_key_lock=False), WRITERS, seed)
        if not _id_order_matches_commit_order(backend):
            return
    pytest.fail("10 unlocked races never committed out of id order; the race is not a race")


def test_sqlite_ids_follow_commit_order(tmp_path: object) -> None:
    from pathlib import Path

    from tests.support.db import sqlite_backend

    backend = sqlite_backend(Path(str(tmp_path)) / "order.sqlite3")
    backend.migrate()
    committed = _race(backend, Outbox(), 12, seed=1)
    assert _committed_by_id(backend) == committed


async def test_postgres_without_the_lock_order_breaks_async(pg_url: str) -> None:
    """The control of the async race: without the lock it does reorder."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    for seed in range(10):
        await _race_async(backend, Outbox(per_key_lock=False), WRITERS, seed, "asyncpg")
        if not _id_order_matches_commit_order(backend):
            return
    pytest.fail("10 unlocked async races never committed out of id order; not a race")


CLAIM_PARAMS: dict[str, dict[str, Any]] = {
    "outbox_claim_batch": {},
    "outbox_claim_batch_skip": {},
    "outbox_claim_batch_tenant": {"tenant": ""},
    "outbox_claim_batch_fair": {
        "per_tenant": 500,
        "weight_tenants": [],
        "weights": [],
        "only": None,
        "skip": [],
    },
}


@pytest.mark.parametrize("name", sorted(CLAIM_PARAMS))
def test_a_claim_takes_a_keys_rows_in_order_whichever_writer_began_first(
    pg_url: str, name: str
) -> None:
    """A writer that begins after the claim's transaction and commits before its statement
    runs (behind a transaction pooler the claim's transaction begins a round trip early)
    left a row whose available_at, its writer's now(), is later than the claim's
    transaction start. That row is due all the same: a claim that took the key's later
    row, written by a writer that began earlier, without it broke the key's order."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    outbox = Outbox()
    early, claiming, late = backend.connect(), backend.connect(), backend.connect()
    try:
        early.execute("SELECT now()")  # the second row's writer begins first
        claiming.execute("SELECT now()")  # then the claim's transaction
        outbox.emit(late, topic="orders", key="k", event_type="E", payload={"n": 1})
        late.commit()  # the first row: its writer began last
        outbox.emit(early, topic="orders", key="k", event_type="E", payload={"n": 2})
        early.commit()
        params = {
            "shards": list(range(16)),
            "floors": [0] * 16,
            "limit": 500,
            "in_flight": [],
            "shard_bytes": UNBOUNDED_BYTES,
            "held_keys": [],
            **CLAIM_PARAMS[name],
        }
        rows = claiming.execute(query("postgres", name), params).fetchall()
        claiming.rollback()
    finally:
        for conn in (early, claiming, late):
            conn.close()
    ids = [int(r[0]) for r in backend.fetch("outbox_rows")]
    assert [int(r[0]) for r in rows] == ids
