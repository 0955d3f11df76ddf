"""The relay, producer_lib and the operator commands behind a real PgBouncer (Debian's
package) in transaction pooling mode with its stock settings; and the statement and lock
timeouts of the relay's connections, which keep a lock or a hung statement from wedging it."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from outbox_core.errors import DatabaseError
from outbox_core.pg_pool import PostgresPool
from outbox_core.queries import parse_blocks
from producer_lib import Event, Outbox
from relay.cli import main as relay_cli
from relay.database import WORK_SETTINGS, DatabaseSettings, make_store
from relay.errors import PoolerRefused, StoreUnavailable
from relay.ops import admin
from relay.service import RelayService
from tests.conftest import TopicFactory
from tests.support.db import DIALECT_SQL, Backend, postgres_backend
from tests.support.ops import park
from tests.support.pgbouncer import own_pgbouncer, pgbouncer_url, through
from tests.support.relay import (
    expected_from_db,
    judge_topic,
    relay_settings,
    running_relay,
    wait_drained,
)
from tests.support.waits import until

pytestmark = pytest.mark.integration

POOLER_SQL = parse_blocks(
    (Path(__file__).parents[1] / "support" / "sql" / "pooler.sql").read_text(), "pooler.sql"
)
SETTING = DIALECT_SQL["postgres"]["server_setting"]
BEHIND: dict[str, Any] = {"database_pooler": "transaction"}


@pytest.fixture(scope="module")
def pgbouncer(postgres_admin: str) -> Iterator[str]:
    with pgbouncer_url(postgres_admin) as url:
        yield url


@pytest.fixture
def direct(pg: Backend) -> Backend:
    """This test's database, migrated (migrations need a direct connection)."""
    return pg


@pytest.fixture
def pooled(direct: Backend, pgbouncer: str) -> Backend:
    """The same database, reached through PgBouncer."""
    return postgres_backend(through(pgbouncer, direct.url))


def pooled_connection(backend: Backend) -> Any:
    # What any application behind PgBouncer 1.18 in transaction mode must do with
    # psycopg: no server-side prepared statements.
    return psycopg.connect(backend.target, prepare_threshold=None)


def write(backend: Backend, topic: str, writer: int, n: int, keys: int) -> None:
    """n events of one writer in transactions of 1-10 events, on one pooled connection."""
    rng = random.Random(writer)
    outbox = Outbox()
    with pooled_connection(backend) as conn:
        done = 0
        while done < n:
            size = min(rng.randint(1, 10), n - done)
            events = [
                Event(topic, f"key-{rng.randrange(keys)}", "OrderPlaced", {"w": writer, "i": i})
                for i in range(done, done + size)
            ]
            outbox.emit_batch(conn, events)
            conn.commit()
            done += size


async def test_the_relay_behind_pgbouncer_publishes_every_event_of_concurrent_writers(
    direct: Backend,
    pooled: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await new_topic("pooled", partitions=3)
    settings = relay_settings(pooled, kafka_bootstrap, listen_notify=True, **BEHIND)
    with caplog.at_level(logging.WARNING, logger="relay"):
        async with running_relay(settings) as relay:
            writers = [
                threading.Thread(target=write, args=(pooled, topic, w, 400, 25)) for w in range(4)
            ]
            for t in writers:
                t.start()
            for t in writers:
                await asyncio.to_thread(t.join)
            await wait_drained(direct)
    expected = expected_from_db(direct)
    ids = [e for key_ids in expected.values() for e in key_ids]
    assert len(ids) == 1600
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    assert verdict.missing(ids) == set()
    assert verdict.order_violations == []
    assert relay.stats.published == 1600
    assert any(
        "listen_notify is off behind a transaction pooler" in r.message for r in caplog.records
    )


async def test_without_the_setting_the_relay_names_pgbouncer_and_the_setting(
    pooled: Backend, kafka_bootstrap: str
) -> None:
    """Stock PgBouncer refuses the options startup parameter the relay's settings travel
    in: the relay says so and how to fix it (exit code 2 from the command), and does not
    wait out its connection retries."""
    service = RelayService(relay_settings(pooled, kafka_bootstrap))
    with pytest.raises(PoolerRefused) as refused:
        await asyncio.wait_for(service.run(), 20)
    text = str(refused.value)
    assert "PgBouncer" in text
    assert "OUTBOX_DATABASE_POOLER=transaction" in text


def test_operator_commands_without_the_setting_name_it(
    pooled: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relay_cli(["status", "--database-url", pooled.url]) == 2
    assert "OUTBOX_DATABASE_POOLER=transaction" in capsys.readouterr().err


def emit(backend: Backend, topic: str, n: int) -> None:
    with pooled_connection(backend) as conn:
        Outbox().emit_batch(conn, [Event(topic, f"k{i % 5}", "T", {"i": i}) for i in range(n)])
        conn.commit()


def row_ids(backend: Backend) -> list[int]:
    return sorted(int(r[0]) for r in backend.fetch("outbox_rows"))


def test_operator_commands_behind_pgbouncer(
    direct: Backend, pooled: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    emit(pooled, "ops", 6)
    ids = row_ids(direct)
    park(direct, ids[:2], "broker said no")
    flags = ["--database-url", pooled.url, "--database-pooler", "transaction"]
    assert relay_cli(["status", *flags]) == 0
    assert "parked: 2" in capsys.readouterr().out
    assert relay_cli(["parked", "list", *flags]) == 0
    assert "broker said no" in capsys.readouterr().out
    assert relay_cli(["parked", "retry", "--id", str(ids[0]), *flags]) == 0
    assert relay_cli(["parked", "discard", "--id", str(ids[1]), "--yes", *flags]) == 0
    after = admin.status(pooled.url, pooler="transaction")
    assert (after.pending, after.parked) == (5, 0)
    # migrate refuses the pooler: its advisory lock would outlive the transaction.
    assert relay_cli(["migrate", *flags]) == 2
    assert "direct connection" in capsys.readouterr().err


async def test_the_session_settings_hold_in_each_transaction_and_do_not_leak(
    direct: Backend, pooled: Backend
) -> None:
    settings = DatabaseSettings(database_url=SecretStr(pooled.url), **BEHIND)
    pool = PostgresPool(
        pooled.target, max_size=1, open_wait_s=10, session=settings.session(WORK_SETTINGS)
    )
    await pool.open()
    try:
        got = dict((str(n), str(v)) for n, v in await pool.settings())
    finally:
        await pool.close()
    assert got["statement_timeout"] == "30000"
    assert got["lock_timeout"] == "5000"
    assert got["synchronous_commit"] == "off"
    # Another client of the same pooler (likely on the same server connection) gets the
    # server's defaults: SET LOCAL ended with each transaction.
    with pooled_connection(pooled) as conn:
        assert conn.execute(SETTING, {"name": "statement_timeout"}).fetchone() == ("0",)
        assert conn.execute(SETTING, {"name": "synchronous_commit"}).fetchone() == ("on",)


async def test_a_pooler_that_drops_the_options_parameter_is_found(
    direct: Backend, postgres_admin: str, kafka_bootstrap: str
) -> None:
    """Told to ignore `options`, PgBouncer accepts the connection and drops the relay's
    settings without a word: the relay finds none of them in force and refuses."""
    with own_pgbouncer(postgres_admin, {"ignore_startup_parameters": "options"}) as url:
        backend = postgres_backend(through(url, direct.url))
        service = RelayService(relay_settings(backend, kafka_bootstrap))
        with pytest.raises(PoolerRefused, match="OUTBOX_DATABASE_POOLER=transaction"):
            await asyncio.wait_for(service.run(), 20)
        # With the setting, the same pooler works.
        async with running_relay(relay_settings(backend, kafka_bootstrap, **BEHIND)) as relay:
            await wait_drained(direct)
        assert relay.stats.store_errors == 0


@pytest.fixture(params=["direct", "pgbouncer"])
def either(request: pytest.FixtureRequest, direct: Backend) -> Backend:
    if request.param == "direct":
        return direct
    pooled: Backend = request.getfixturevalue("pooled")
    return pooled


def _pooler(backend: Backend, direct: Backend) -> dict[str, Any]:
    return {} if backend is direct else BEHIND


def _locking(backend: Backend) -> Iterator[None]:
    """Someone else's open transaction holding outbox_events in ACCESS EXCLUSIVE mode."""
    conn = psycopg.connect(backend.target)
    try:
        conn.execute(POOLER_SQL["pooler_lock_outbox"])
        yield
    finally:
        conn.rollback()
        conn.close()


async def test_a_lock_held_elsewhere_times_out_the_claim_and_the_relay_carries_on(
    either: Backend, direct: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """Claims lock no rows, so only someone else's table lock (a DDL, a LOCK TABLE in an
    open transaction) can hold one: the wait ends after lock_timeout, the cycle backs off
    and claims again, and everything is published once the lock is gone. Without
    lock_timeout the first claim would wait for as long as the lock is held, and the
    second store error below would never come."""
    topic = await new_topic("locked")
    settings = relay_settings(
        either, kafka_bootstrap, database_lock_timeout_s=0.3, **_pooler(either, direct)
    )
    lock = iter(_locking(direct))
    try:
        async with running_relay(settings) as relay:
            await until(lambda: relay.stats.last_heartbeat_ok > 0, 60, "the first lease round")
            # In a thread: LOCK TABLE waits for any transaction of the relay's in flight,
            # which only this loop can finish.
            await asyncio.to_thread(next, lock)
            await until(lambda: relay.stats.store_errors >= 2, 60, "two store errors")
            next(lock, None)  # the lock's transaction ends
            # In a thread: the relay shares this loop, and a transaction it has begun
            # holds one of the pooler's server connections until the loop runs it on.
            await asyncio.to_thread(emit, either, topic, 50)
            await wait_drained(direct)
    finally:
        next(lock, None)
    assert relay.stats.published == 50


async def test_a_hung_statement_ends_after_statement_timeout(
    either: Backend, direct: Backend
) -> None:
    """A relay statement that would run for an hour (a heartbeat stuck in a trigger) fails
    after statement_timeout as a retried store error, instead of holding its loop."""
    with psycopg.connect(direct.target) as conn:
        conn.execute(POOLER_SQL["pooler_hang_heartbeat"])
    settings = DatabaseSettings(
        database_url=SecretStr(either.url),
        database_statement_timeout_s=0.5,
        database_lock_timeout_s=0.5,
        **_pooler(either, direct),
    )
    store = make_store(settings)
    await store.open()
    try:
        with pytest.raises(StoreUnavailable) as failed:
            await asyncio.wait_for(store.replica_heartbeat("hung", 10.0), 60)
    finally:
        await store.close()
    cause = failed.value.__cause__
    assert isinstance(cause, DatabaseError)
    assert cause.sqlstate == "57014"  # query_canceled: statement timeout
