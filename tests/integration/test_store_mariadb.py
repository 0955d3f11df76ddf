"""What the store on MariaDB must get right beyond the conformance suite: its writes by a
list of ids never wait for a producer's open transaction (InnoDB locks every row a write
reads, uncommitted inserts included), and the lists it sends as JSON arrays (held keys,
tenant names) read back exactly, whatever characters they hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from outbox_core import mariadb_pool
from outbox_core.errors import DatabaseError, OutboxError
from outbox_core.executors import Statement
from outbox_core.mariadb_pool import MariadbPool, session_init
from outbox_core.queries import query
from producer_lib import Outbox
from relay.database import DatabaseSettings
from relay.database import make_store as make_sql_store
from relay.errors import StoreUnavailable
from relay.ops import admin
from relay.store import Failure, Store, TenantTurns
from tests.support import mariadb
from tests.support.db import Backend, mariadb_backend
from tests.support.ops import tcp_gate
from tests.support.stores import (
    SHARD_COUNT,
    claim,
    emit,
    event,
    ids_of,
    keys_on_shard,
    opened_store,
    settle,
)
from tests.support.waits import until

pytestmark = pytest.mark.integration

SHARD = 3
OWNER = "relay-1"


@pytest.fixture
def maria(mariadb_url: str) -> Backend:
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    return backend


@pytest.fixture
async def store(maria: Backend) -> AsyncIterator[Store]:
    async with opened_store(maria) as opened:
        yield opened


@pytest.fixture
def open_insert(maria: Backend) -> Iterator[Any]:
    """A producer's transaction that inserted a row of SHARD and stays open."""
    conn = maria.connect()
    (key,) = keys_on_shard(SHARD, 1, prefix="open")
    Outbox(shard_count=SHARD_COUNT).emit(
        conn, topic="orders", key=key, event_type="Open", payload={}
    )
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


async def test_settles_and_operator_actions_do_not_wait_for_an_open_insert(
    maria: Backend, store: Store, open_insert: Any
) -> None:
    """A lock wait would end in a StoreUnavailable after the relay's lock timeout."""
    a, b, c, d = keys_on_shard(SHARD, 4)
    deleted, kept, large, failed, parked = emit(
        maria, event(a), event(b), event(c, payload=b"x" * 2048), event(d), event(d)
    )
    token = await store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    done = await settle(
        store,
        OWNER,
        {SHARD: token},
        [deleted],
        [Failure(failed, "slow", 60.0, False), Failure(parked, "poison", 0.0, True)],
        False,
    )
    assert (done.published, done.failed) == (1, 2)
    moved = await settle(store, OWNER, {SHARD: token}, [kept, large], [], True, move_max_bytes=1024)
    assert moved.published == 2
    assert (await store.parked_retry([parked])).ids == [parked]
    await settle(store, OWNER, {SHARD: token}, [], [Failure(parked, "again", 0.0, True)], False)
    assert (await store.parked_discard([parked])).ids == [parked]
    # Not a replay: it writes rows back under their event ids, and InnoDB's duplicate
    # check on the unique index locks the next entry, which may be the open insert's (a
    # wait of up to the lock timeout about one run in three; docs/relay.md, known limits).
    assert await store.lease_renew(OWNER, {SHARD: token}, 30) == {SHARD}
    status = admin.status(maria.url)
    assert status.pending == 1  # the failed row, backing off; the open insert is unseen


async def test_a_steady_claim_is_one_round_trip_and_a_settle_two(
    maria: Backend, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shard with a backlog: the claim sends the shard filter and the claim of the
    shards in one round trip; the settle sends its fence with the transaction's start,
    then its writes with the commit. What a cycle costs in round trips, besides the send."""
    import aiomysql

    sent: list[Any] = []
    real = aiomysql.Connection._execute_command

    async def counted(self: Any, command: int, sql: Any) -> Any:
        sent.append(sql)
        return await real(self, command, sql)

    rows = emit(maria, *(event(k) for k in keys_on_shard(SHARD, 3)))
    token = await store.lease_acquire(SHARD, OWNER, 30)
    assert token is not None
    monkeypatch.setattr(aiomysql.Connection, "_execute_command", counted)
    claimed = await claim(store, list(range(SHARD_COUNT)), 100, "block_key")
    assert sorted(ids_of(claimed)) == sorted(rows)
    assert len(sent) == 1, sent
    sent.clear()
    done = await settle(store, OWNER, {SHARD: token}, rows, [], True)
    assert (done.published, done.lost) == (3, frozenset())
    assert len(sent) == 2, sent
    monkeypatch.undo()
    assert await claim(store, list(range(SHARD_COUNT)), 100, "block_key") == []


async def test_a_statement_after_its_plans_commit_is_refused(maria: Backend) -> None:
    """It would run in autocommit, alone, outside the transaction its plan meant."""

    def plan() -> Any:
        yield Statement("outbox_count_unpublished", commit=True)
        yield Statement("outbox_count_unpublished")

    pool = MariadbPool(maria.url, max_size=1)
    await pool.open()
    try:
        with pytest.raises(OutboxError, match="follows its plan's commit"):
            await pool.run_plan(plan(), write=True)
        assert await pool.run(Statement("outbox_count_unpublished")) == [(0,)]
    finally:
        await pool.close()


HOSTILE = ["it's", 'a "quote"', "back\\slash", "%(limit)s", "--", "é☕", "' OR 1=1 --"]


async def test_hostile_keys_and_tenants_travel_intact(maria: Backend, store: Store) -> None:
    """Held keys and tenant names reach JSON_TABLE as JSON text the driver escapes: each
    one names exactly itself."""
    rows = emit(maria, *(event(k, tenant=k) for k in HOSTILE))
    shards = sorted({r.shard for r in await claim(store, list(range(SHARD_COUNT)), 100, "skip")})
    everything = await claim(store, shards, 100, "skip")
    assert sorted(ids_of(everything)) == sorted(rows)
    held = await claim(store, shards, 100, "skip", held_keys=HOSTILE[:3])
    assert sorted(r.key for r in held) == sorted(HOSTILE[3:])
    for tenant in HOSTILE:
        lone = await claim(store, shards, 100, "skip", turns=TenantTurns(only=frozenset({tenant})))
        assert [(r.key, r.tenant) for r in lone] == [(tenant, tenant)]
        fair = TenantTurns(weights={tenant: 3}, skip=frozenset({tenant}))
        rest = await claim(store, shards, 100, "block_key", turns=fair)
        assert sorted(r.tenant or "" for r in rest) == sorted(set(HOSTILE) - {tenant})


@pytest.mark.parametrize("replica", ["relay-1", *HOSTILE])
def test_a_relay_session_carries_its_replica_id(maria: Backend, replica: str) -> None:
    """The relay's init_command renders the replica id as a string literal the driver
    escapes: whatever it holds, the session variable names exactly it, and the timeouts
    beside it (a lock wait's also bounding an idle transaction) still apply."""
    conn = mariadb.connect(maria.target, init_command=session_init(2.5, 7.0, replica))
    try:
        rows = maria.run_on(conn, "relay_session_settings")
    finally:
        conn.close()
    assert rows == [(replica, 3, 3, 7.0)]


async def test_a_settle_and_its_relays_renewal_lock_the_lease_rows_in_one_order(
    maria: Backend, store: Store
) -> None:
    """The settle's fence and the renewal each lock the same lease rows in one statement:
    taken in two orders they deadlock (1213), and
    the settle, the smaller transaction, is rolled back: its batch is sent again. A
    session holding the middle row lines both up behind it, the settle first, whatever
    order the relay's held shards come in."""
    shards = [4, 8, 12]
    held: dict[int, int] = {}
    for shard in reversed(shards):  # an order a relay may have taken them in
        token = await store.lease_acquire(shard, OWNER, 30)
        assert token is not None
        held[shard] = token
    blocker = maria.connect()
    try:
        maria.run_on(blocker, "lease_row_hold", {"shard": 8})
        waiting = asyncio.create_task(settle(store, OWNER, held, [], [], False))
        await until(lambda: maria.lock_waiters() == 1, 10, "the settle to wait", blocking=True)
        renewing = asyncio.create_task(store.lease_renew(OWNER, held, 30))
        await until(lambda: maria.lock_waiters() == 2, 10, "the renewal to wait", blocking=True)
    finally:
        blocker.commit()
        blocker.close()
    settled, renewed = await asyncio.gather(waiting, renewing)
    assert settled.lost == frozenset()
    assert renewed == set(shards)


async def test_a_relay_stopped_inside_its_settle_holds_no_shard_past_a_lock_wait(
    maria: Backend,
) -> None:
    """A relay paused (SIGSTOP) between two statements of its settle keeps the transaction
    open, with its lease rows locked in share mode: the takeover, after the lease expired,
    would wait for them for as long as the pause lasts. The relay's sessions end a
    transaction left idle for a lock wait's length, so the takeover gets the shard."""
    settings = DatabaseSettings(database_url=SecretStr(maria.url), database_lock_timeout_s=1.0)
    stopped = mariadb.connect(maria.target, init_command=session_init(1.0, 30.0, "relay-1"))
    store = make_sql_store(settings)
    await store.open()
    try:
        token = await store.lease_acquire(SHARD, "relay-1", 30)
        maria.execute("leases_lapse")  # relay-1's lease expires during the pause
        stopped.begin()
        with stopped.cursor() as fence:  # the settle's first statement, then the pause
            fence.execute(
                query("mariadb", "lease_check"),
                {"shards": f"[{SHARD}]", "owner": "relay-1", "tokens": f"[{token}]"},
            )
            assert fence.fetchall() == ((SHARD,),)

        async def taken() -> int | None:
            try:
                return await store.lease_acquire(SHARD, "relay-2", 30)
            except StoreUnavailable:  # a lock wait that timed out: the next round tries again
                return None

        assert await until(taken, 10, "relay-2 to take the shard over") == (token or 0) + 1
    finally:
        await store.close()
        stopped.close()


async def test_a_connection_refused_is_a_retriable_database_error(maria: Backend) -> None:
    """The server away: the connection in the pool is reset and a new one is refused.
    Both reach the caller as outbox_core's retriable DatabaseError, never the driver's."""
    parts = urlsplit(maria.target)
    async with tcp_gate(f"{parts.hostname}:{parts.port}") as gate:
        await gate.open()
        through = parts._replace(netloc=f"{parts.netloc.rpartition('@')[0]}@{gate.address}")
        pool = MariadbPool(through.geturl(), max_size=1, checkout_timeout_s=5)
        await pool.open()
        try:
            assert await pool.run(Statement("outbox_count_unpublished")) == [(0,)]
            gate.cut()
            for _ in range(2):  # the reset connection, then a new one refused
                with pytest.raises(DatabaseError) as caught:
                    await pool.run(Statement("outbox_count_unpublished"))
                assert caught.value.retriable, caught.value
        finally:
            await pool.close()


async def test_closing_the_pool_does_not_wait_for_a_connection_never_given_back(
    maria: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiomysql's close waits for every connection checked out; the relay's shutdown
    must end even when one was lost to a cancelled statement."""
    monkeypatch.setattr(mariadb_pool, "CLOSE_WAIT_S", 0.5)
    pool = MariadbPool(maria.url, max_size=2)
    await pool.open()
    lost = await pool._pool.acquire()
    assert await pool.run(Statement("outbox_count_unpublished")) == [(0,)]
    await asyncio.wait_for(pool.close(), 30)
    assert lost.closed
