"""emit joins the caller's transaction: durable exactly when the business write is.

Every scenario runs on real Postgres, MariaDB and a real SQLite file, through every kind
of connection emit accepts.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from typing import Any

import psycopg
import pytest

from outbox_core.sharding import shard_for
from producer_lib import (
    ConfigurationError,
    DuplicateEventId,
    Event,
    MigrationError,
    Outbox,
    ReservedHeader,
    UnsupportedConnection,
)
from tests.support.db import Backend
from tests.support.events import emit_kwargs
from tests.support.transactions import (
    ASYNC_KINDS,
    SYNC_KINDS,
    async_tx,
    connect_aiomysql,
    connect_mysqldb,
    connect_psycopg2,
    insert_order,
    insert_order_async,
    sqlalchemy_url,
    sync_tx,
)

pytestmark = pytest.mark.integration


class Boom(Exception):
    pass


@pytest.fixture
def orders(emit_backend: Backend) -> Backend:
    emit_backend.execute("test_orders_create")
    return emit_backend


def _check_row(backend: Backend, row: tuple[Any, ...], event_id: uuid.UUID, key: str) -> None:
    _id, got_id, topic, got_key, shard, event_type, payload, headers, attempts, status, pub, err = (
        row
    )
    assert uuid.UUID(str(got_id)) == event_id
    assert (topic, got_key, event_type) == ("orders", key, "OrderPlaced")
    assert shard == shard_for(key, 16)
    assert json.loads(bytes(payload)) == {"order_id": 1, "total": "12.50"}
    parsed = headers if isinstance(headers, dict) else json.loads(headers)
    assert parsed["x-tenant"] == "acme"
    assert parsed["content-type"] == "application/json"
    assert (attempts, status, pub, err) == (0, "pending", None, None)


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_commit_leaves_exactly_one_row(orders: Backend, kind: str) -> None:
    event_id = uuid.uuid4()
    with sync_tx(orders, kind) as conn:
        insert_order(orders, conn, 1)
        got = Outbox().emit(conn, **emit_kwargs(event_id=event_id))
    assert got == event_id
    rows = orders.fetch("outbox_rows")
    assert len(rows) == 1
    _check_row(orders, rows[0], event_id, "order-1")
    assert orders.scalar("test_order_count") == 1


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_rollback_leaves_no_event(orders: Backend, kind: str) -> None:
    with pytest.raises(Boom), sync_tx(orders, kind) as conn:
        insert_order(orders, conn, 1)
        Outbox().emit(conn, **emit_kwargs())
        Outbox().emit_batch(conn, [Event("orders", "k2", "OrderPlaced", {})])
        raise Boom
    assert orders.scalar("outbox_count") == 0
    assert orders.scalar("test_order_count") == 0


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_commit_and_rollback(orders: Backend, kind: str) -> None:
    outbox = Outbox()
    event_id = uuid.uuid4()
    async with async_tx(orders, kind) as conn:
        await insert_order_async(orders, conn, 1)
        assert await outbox.emit_async(conn, **emit_kwargs(event_id=event_id)) == event_id
    with pytest.raises(Boom):
        async with async_tx(orders, kind) as conn:
            await insert_order_async(orders, conn, 2)
            await outbox.emit_async(conn, **emit_kwargs(key="order-2"))
            await outbox.emit_batch_async(conn, [Event("orders", "k3", "OrderPlaced", {})])
            raise Boom
    rows = orders.fetch("outbox_rows")
    assert len(rows) == 1
    _check_row(orders, rows[0], event_id, "order-1")
    assert orders.scalar("test_order_count") == 1


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_batch_keeps_caller_order(orders: Backend, kind: str) -> None:
    events = [Event("orders", f"k{i % 7}", "OrderPlaced", {"i": i}) for i in range(60)]
    with sync_tx(orders, kind) as conn:
        ids = Outbox().emit_batch(conn, events)
    rows = orders.fetch("outbox_rows")
    assert [uuid.UUID(str(r[1])) for r in rows] == ids
    assert [json.loads(bytes(r[6]))["i"] for r in rows] == list(range(60))
    assert [r[3] for r in rows] == [e.key for e in events]


BINARY_PAYLOADS = [
    random.Random(5).randbytes(200_000),
    b"",
    b"\x00\xff\\x00'\"{}\n",
    bytes(range(256)),
]


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_batch_payloads_are_stored_byte_for_byte(orders: Backend, kind: str) -> None:
    """A batch's payloads travel as one array (binary through psycopg 3): empty ones, NULs,
    quotes, backslashes and every byte value arrive as they were sent."""
    events = [Event("orders", f"k{i}", "Blob", p) for i, p in enumerate(BINARY_PAYLOADS)]
    with sync_tx(orders, kind) as conn:
        Outbox().emit_batch(conn, events)
    assert [bytes(r[6]) for r in orders.fetch("outbox_rows")] == BINARY_PAYLOADS


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_batch_payloads_are_stored_byte_for_byte(orders: Backend, kind: str) -> None:
    events = [Event("orders", f"k{i}", "Blob", p) for i, p in enumerate(BINARY_PAYLOADS)]
    async with async_tx(orders, kind) as conn:
        await Outbox().emit_batch_async(conn, events)
    assert [bytes(r[6]) for r in orders.fetch("outbox_rows")] == BINARY_PAYLOADS


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_tenant_is_stored_with_each_event(orders: Backend, kind: str) -> None:
    """emit and emit_batch store the tenant in its own column (NULL without one); the
    single insert, the locked one and the batch insert alike."""
    with sync_tx(orders, kind) as conn:
        Outbox().emit(conn, **emit_kwargs(tenant="acme"))
        Outbox(per_key_lock=False).emit(conn, **emit_kwargs(key="order-2", tenant="globex"))
        Outbox().emit(conn, **emit_kwargs(key="order-3"))
        Outbox().emit_batch(
            conn,
            [
                Event("orders", "k1", "E", {}, tenant="acme"),
                Event("orders", "k2", "E", {}),
                Event("orders", "k3", "E", {}, tenant="t" * 255),
            ],
        )
    assert [(k, t) for _, k, t in orders.fetch("outbox_row_tenants")] == [
        ("order-1", "acme"),
        ("order-2", "globex"),
        ("order-3", None),
        ("k1", "acme"),
        ("k2", None),
        ("k3", "t" * 255),
    ]


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_emit_stores_the_tenant(orders: Backend, kind: str) -> None:
    async with async_tx(orders, kind) as conn:
        await Outbox().emit_async(conn, **emit_kwargs(tenant="acme"))
        await Outbox().emit_batch_async(conn, [Event("orders", "k1", "E", {}, tenant="b")])
    assert [t for _, _, t in orders.fetch("outbox_row_tenants")] == ["acme", "b"]


async def test_async_batch_keeps_caller_order(orders: Backend) -> None:
    events = [Event("orders", f"k{i % 5}", "OrderPlaced", {"i": i}) for i in range(40)]
    async with async_tx(orders, "sa_async_session") as conn:
        ids = await Outbox().emit_batch_async(conn, events)
    assert [uuid.UUID(str(r[1])) for r in orders.fetch("outbox_rows")] == ids


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_bad_input_raises_before_any_write(orders: Backend, kind: str) -> None:
    """One hostile input on each real database and connection (every input is checked
    without a database in tests/unit/test_emit_validation.py): the error comes before any
    SQL, so the caller's transaction stays usable and commits its own row."""
    outbox = Outbox(max_event_bytes=4096)
    override: dict[str, Any] = {"headers": {"event_id": "x"}}
    with sync_tx(orders, kind) as conn:
        insert_order(orders, conn, 1)
        with pytest.raises(ReservedHeader) as info:
            outbox.emit(conn, **emit_kwargs(**override))
        with pytest.raises(ReservedHeader):
            outbox.emit_batch(
                conn, [Event("orders", "ok", "E", {}), Event(**emit_kwargs(**override))]
            )
    assert orders.scalar("test_order_count") == 1
    assert orders.scalar("outbox_count") == 0
    assert type(info.value) is ReservedHeader
    assert str(info.value)


def _autocommit_refused(backend: Backend, raws: list[Any], sa_kind: str) -> None:
    """Each raw connection (autocommit mode, no BEGIN) and a Connection of an AUTOCOMMIT
    engine on the SQLAlchemy driver `sa_kind` names are refused with NoTransaction."""
    from sqlalchemy import create_engine

    from producer_lib import NoTransaction

    for raw in raws:
        try:
            with pytest.raises(NoTransaction):
                Outbox().emit(raw, **emit_kwargs())
        finally:
            raw.close()
    engine = create_engine(sqlalchemy_url(backend, sa_kind), isolation_level="AUTOCOMMIT")
    with engine.connect() as sa_conn, pytest.raises(NoTransaction):
        Outbox().emit(sa_conn, **emit_kwargs())
    engine.dispose()


def test_no_transaction_to_join_is_refused(orders: Backend, tmp_path: Any) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from producer_lib import NoTransaction

    outbox = Outbox()
    if orders.dialect == "mariadb":
        from tests.support.mariadb import connect

        mysqldb = connect_mysqldb(orders)
        mysqldb.autocommit(True)
        raws = [connect(orders.target, autocommit=True), mysqldb]
        _autocommit_refused(orders, raws, "sa_mysqldb_connection")
    elif orders.dialect == "postgres":
        psycopg2_raw = connect_psycopg2(orders)
        psycopg2_raw.autocommit = True
        raws = [psycopg.connect(orders.target, autocommit=True), psycopg2_raw]
        _autocommit_refused(orders, raws, "sa_psycopg2_connection")
    else:
        import sqlite3

        conn3 = sqlite3.connect(orders.target, isolation_level=None)
        with pytest.raises(NoTransaction):
            outbox.emit(conn3, **emit_kwargs())
        conn3.close()
    engine = create_engine(orders.sqlalchemy_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as sa_conn, pytest.raises(NoTransaction):
        outbox.emit(sa_conn, **emit_kwargs())
    with (
        Session(engine.execution_options(isolation_level="AUTOCOMMIT")) as s,
        pytest.raises(NoTransaction),
    ):
        outbox.emit(s, **emit_kwargs())
    plain = create_engine(orders.sqlalchemy_url)
    with Session(plain, autobegin=False) as s, pytest.raises(NoTransaction):
        outbox.emit(s, **emit_kwargs())
    engine.dispose()
    plain.dispose()
    assert orders.scalar("outbox_count") == 0


@pytest.mark.dialects("mariadb")
@pytest.mark.parametrize("driver", ["pymysql", "mysqldb"])
def test_a_mysql_connection_in_autocommit_joins_a_begun_transaction(
    orders: Backend, driver: str
) -> None:
    """In autocommit mode, emit joins a transaction begun with BEGIN (PyMySQL knows it
    from the server's status flags, mysqlclient by asking): the caller's rollback takes
    the event with the business row."""
    raw = orders.connect() if driver == "pymysql" else connect_mysqldb(orders)
    try:
        raw.autocommit(True)
        raw.begin()
        insert_order(orders, raw, 1)
        Outbox().emit(raw, **emit_kwargs())
        raw.rollback()
    finally:
        raw.close()
    assert orders.scalar("test_order_count") == 0
    assert orders.scalar("outbox_count") == 0


@pytest.mark.dialects("mariadb")
@pytest.mark.parametrize("driver", ["pymysql", "mysqldb"])
def test_a_mysql_connection_in_another_character_set_is_refused(
    orders: Backend, driver: str
) -> None:
    """The schema is utf8mb4: a latin1 connection would fail on, or replace, what it
    cannot encode, so emit refuses it before writing."""
    from tests.support.mariadb import connect

    raw = (
        connect(orders.target, charset="latin1")
        if driver == "pymysql"
        else connect_mysqldb(orders, charset="latin1")
    )
    try:
        with pytest.raises(UnsupportedConnection, match="utf8mb4"):
            Outbox().emit(raw, **emit_kwargs())
    finally:
        raw.close()
    assert orders.scalar("outbox_count") == 0


async def test_async_no_transaction_is_refused(orders: Backend) -> None:
    from producer_lib import NoTransaction

    if orders.dialect == "mariadb":
        await _async_no_transaction_on_mariadb(orders)
        return
    if orders.dialect != "postgres":
        pytest.skip("psycopg is Postgres only")
    conn = await psycopg.AsyncConnection.connect(orders.target, autocommit=True)
    try:
        with pytest.raises(NoTransaction):
            await Outbox().emit_async(conn, **emit_kwargs())
    finally:
        await conn.close()
    import asyncpg

    raw = await asyncpg.connect(orders.target)  # asyncpg commits each statement by itself
    try:
        with pytest.raises(NoTransaction):
            await Outbox().emit_async(raw, **emit_kwargs())
    finally:
        await raw.close()
    await _async_autocommit_refused(sqlalchemy_url(orders, "sa_asyncpg_connection"))
    assert orders.scalar("outbox_count") == 0


async def _async_no_transaction_on_mariadb(orders: Backend) -> None:
    from producer_lib import NoTransaction

    raw = await connect_aiomysql(orders)
    await raw.autocommit(True)
    try:
        with pytest.raises(NoTransaction):
            await Outbox().emit_async(raw, **emit_kwargs())
    finally:
        raw.close()
    await _async_autocommit_refused(orders.async_sqlalchemy_url)
    assert orders.scalar("outbox_count") == 0


async def _async_autocommit_refused(url: str) -> None:
    """An AsyncConnection and an AsyncSession of an AUTOCOMMIT engine are refused."""
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from producer_lib import NoTransaction

    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as sa_conn:
            with pytest.raises(NoTransaction):
                await Outbox().emit_async(sa_conn, **emit_kwargs())
        async with AsyncSession(engine) as session:
            with pytest.raises(NoTransaction):
                await Outbox().emit_async(session, **emit_kwargs())
    finally:
        await engine.dispose()


def test_unsupported_connections_are_refused(orders: Backend) -> None:
    outbox = Outbox()
    with pytest.raises(UnsupportedConnection):
        outbox.emit(object(), **emit_kwargs())
    with pytest.raises(UnsupportedConnection):
        outbox.emit("postgresql://x", **emit_kwargs())


async def test_sync_connection_given_to_emit_async_is_refused(orders: Backend) -> None:
    conn = orders.connect()
    try:
        with pytest.raises(UnsupportedConnection):
            await Outbox().emit_async(conn, **emit_kwargs())
    finally:
        conn.close()


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_deliver_after_uses_the_database_clock(orders: Backend, kind: str) -> None:
    at = dt.datetime(2031, 5, 6, 7, 8, 9, 500000, tzinfo=dt.UTC)
    with sync_tx(orders, kind) as conn:
        outbox = Outbox()
        outbox.emit(conn, **emit_kwargs(key="a", deliver_after=dt.timedelta(seconds=90)))
        outbox.emit(conn, **emit_kwargs(key="b", deliver_after=at))
    rows = orders.fetch("outbox_delays")
    delay_a, available_b = rows[0][1], rows[1][2]
    assert abs(float(delay_a) - 90.0) < 0.01
    assert _utc(available_b) == at


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_deliver_after_uses_the_database_clock(orders: Backend, kind: str) -> None:
    at = dt.datetime(2031, 5, 6, 7, 8, 9, 500000, tzinfo=dt.UTC)
    async with async_tx(orders, kind) as conn:
        outbox = Outbox()
        await outbox.emit_async(
            conn, **emit_kwargs(key="a", deliver_after=dt.timedelta(seconds=90))
        )
        await outbox.emit_batch_async(conn, [Event("orders", "b", "E", {}, deliver_after=at)])
    rows = orders.fetch("outbox_delays")
    delay_a, available_b = rows[0][1], rows[1][2]
    assert abs(float(delay_a) - 90.0) < 0.01
    assert _utc(available_b) == at


def _utc(value: str | dt.datetime) -> dt.datetime:
    """A time column as read back: SQLite's ISO text, MariaDB's naive UTC DATETIME or
    Postgres's aware timestamptz."""
    if isinstance(value, str):
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_duplicate_event_id_is_a_typed_error(orders: Backend, kind: str) -> None:
    event_id = uuid.uuid4()
    with sync_tx(orders, kind) as conn:
        Outbox().emit(conn, **emit_kwargs(event_id=event_id))
    with pytest.raises(DuplicateEventId), sync_tx(orders, kind) as conn:
        Outbox().emit(conn, **emit_kwargs(event_id=event_id))
    assert orders.scalar("outbox_count") == 1


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_duplicate_event_id_is_a_typed_error(orders: Backend, kind: str) -> None:
    event_id = uuid.uuid4()
    async with async_tx(orders, kind) as conn:
        await Outbox().emit_async(conn, **emit_kwargs(event_id=event_id))
    with pytest.raises(DuplicateEventId):
        async with async_tx(orders, kind) as conn:
            await Outbox().emit_async(conn, **emit_kwargs(event_id=event_id))
    assert orders.scalar("outbox_count") == 1


def test_shard_count_must_match_the_database(orders: Backend) -> None:
    with pytest.raises(ConfigurationError, match="shard_count"), sync_tx(orders, "driver") as conn:
        Outbox(shard_count=8).emit(conn, **emit_kwargs())
    assert orders.scalar("outbox_count") == 0


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_missing_tables_say_run_migrate(empty_emit_backend: Backend, kind: str) -> None:
    empty_backend = empty_emit_backend
    with pytest.raises(MigrationError, match="migrate"), sync_tx(empty_backend, kind) as conn:
        Outbox().emit(conn, **emit_kwargs())


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_missing_tables_say_run_migrate(empty_emit_backend: Backend, kind: str) -> None:
    with pytest.raises(MigrationError, match="migrate"):
        async with async_tx(empty_emit_backend, kind) as conn:
            await Outbox().emit_async(conn, **emit_kwargs())


def test_trace_context_travels_in_headers(orders: Backend) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    ctx = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with sync_tx(orders, "driver") as conn, trace.use_span(NonRecordingSpan(ctx)):
        Outbox().emit(conn, **emit_kwargs())
    headers = orders.fetch("outbox_rows")[0][7]
    parsed = headers if isinstance(headers, dict) else json.loads(headers)
    assert parsed["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.dialects("mariadb")
@pytest.mark.parametrize("kind", ["driver", "mysqldb"])
def test_a_batch_is_one_insert_statement_on_mariadb(orders: Backend, kind: str) -> None:
    """PyMySQL and mysqlclient fold the batch's rows into one multi-row INSERT: the rows
    cost one round trip, in the caller's order."""
    with sync_tx(orders, kind) as conn:
        (before,) = orders.run_on(conn, "session_inserts")
        ids = Outbox().emit_batch(
            conn, [Event("orders", f"k{i}", "E", {"i": i}) for i in range(10)]
        )
        (after,) = orders.run_on(conn, "session_inserts")
    assert int(after[1]) - int(before[1]) == 1
    assert [uuid.UUID(str(r[1])) for r in orders.fetch("outbox_rows")] == ids
