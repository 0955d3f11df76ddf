"""Per-key order: ids of one key follow commit order, however writers interleave."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from outbox_core.queries import query
from producer_lib import Outbox
from relay.store.protocol import UNBOUNDED_BYTES
from tests.support.db import Backend, postgres_backend
from tests.support.transactions import async_tx, connect_psycopg2

pytestmark = pytest.mark.integration

WRITERS = 24


def _race(
    backend: Backend, outbox: Outbox, writers: int, seed: int, kind: str = "driver"
) -> list[str]:
    """Writers emit for one key, sleep a random while holding the transaction, commit.

    Returns the keys' labels in the order their commits returned (SQLite) — Postgres
    tests read the true commit order from pg_xact_commit_timestamp instead.
    """
    rng = random.Random(seed)
    sleeps = [rng.uniform(0.0, 0.03) for _ in range(writers)]
    start = threading.Barrier(writers)
    committed: list[str] = []
    guard = threading.Lock()
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            conn = backend.connect() if kind == "driver" else connect_psycopg2(backend)
            try:
                start.wait()
                outbox.emit(conn, topic="orders", key="hot-key", event_type="E", payload={"w": i})
                time.sleep(sleeps[i])
                with guard:
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
    rows = backend.fetch("outbox_rows")
    import json

    by_id = [str(json.loads(bytes(r[6]))["w"]) for r in rows]
    assert by_id == committed


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
