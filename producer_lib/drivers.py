"""Running plans on the caller's connection: the one place driver objects and errors meet.

Supported: SQLAlchemy Session, Connection, AsyncSession and AsyncConnection (psycopg 3 or
sqlite3 underneath), a raw psycopg 3 Connection or AsyncConnection, and sqlite3.Connection.
Every driver exception leaves this module as an OutboxError (see translate).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any, Protocol

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from producer_lib.errors import (
    DatabaseError,
    DuplicateEventId,
    MigrationError,
    NoTransaction,
    OutboxError,
    UnsupportedConnection,
)
from producer_lib.plans import Plan, Rows, Step
from producer_lib.queries import Dialect, query

_RETRIABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})


class SyncExecutor(Protocol):
    dialect: Dialect

    def run(self, step: Step) -> Rows: ...


class AsyncExecutor(Protocol):
    dialect: Dialect

    async def run(self, step: Step) -> Rows: ...


def run_step(executor: SyncExecutor, step: Step) -> Rows:
    """One named query on a sync executor, driver errors translated."""
    try:
        return executor.run(step)
    except OutboxError:
        raise
    except Exception as exc:
        raise translate(exc) from exc


def run_plan(plan: Plan, executor: SyncExecutor) -> Any:
    try:
        step = next(plan)
        while True:
            step = plan.send(run_step(executor, step))
    except StopIteration as done:
        return done.value


async def run_plan_async(plan: Plan, executor: AsyncExecutor) -> Any:
    try:
        step = next(plan)
        while True:
            try:
                rows = await executor.run(step)
            except OutboxError:
                raise
            except Exception as exc:
                raise translate(exc) from exc
            step = plan.send(rows)
    except StopIteration as done:
        return done.value


# --------------------------------------------------------------------------- errors


def translate(exc: BaseException) -> OutboxError:
    """The single boundary where driver exceptions become producer_lib exceptions."""
    orig: BaseException = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps DBAPI errors
    message = f"{type(orig).__name__}: {orig}".strip()
    if isinstance(orig, psycopg.Error):
        state = orig.sqlstate
        if state == "23505" and "outbox_events_event_id_key" in str(orig):
            return DuplicateEventId("an event with this event_id already exists", field="event_id")
        if state == "42P01":
            return MigrationError(
                f"outbox tables are missing, run `outbox-relay migrate`: {message}"
            )
        retriable = (
            state in _RETRIABLE_SQLSTATES
            or (state or "").startswith("08")
            or (
                state is None
                and isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)
            )
        )
        return DatabaseError(message, retriable=retriable, sqlstate=state)
    if isinstance(orig, sqlite3.Error):
        text = str(orig)
        if isinstance(orig, sqlite3.IntegrityError) and "outbox_events.event_id" in text:
            return DuplicateEventId("an event with this event_id already exists", field="event_id")
        if "no such table" in text:
            return MigrationError(
                f"outbox tables are missing, run `outbox-relay migrate`: {message}"
            )
        retriable = isinstance(orig, sqlite3.OperationalError) and (
            "locked" in text or "busy" in text
        )
        return DatabaseError(message, retriable=retriable)
    return DatabaseError(message, retriable=False)


# --------------------------------------------------------------------------- executors


def _rows(cursor: Any) -> Rows:
    return [tuple(r) for r in cursor.fetchall()] if cursor.description else []


class SqliteExecutor:
    dialect: Dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        autocommit = getattr(conn, "autocommit", None)  # Python 3.12+
        if not conn.in_transaction and (conn.isolation_level is None or autocommit is True):
            raise NoTransaction(
                "sqlite3 connection is in autocommit mode with no open transaction: "
                "run BEGIN first so the event commits with your write"
            )
        self.conn = conn

    def run(self, step: Step) -> Rows:
        sql = query(self.dialect, step.query)
        if step.many:
            self.conn.executemany(sql, step.params)
            return []
        return _rows(self.conn.execute(sql, step.params))


class PsycopgExecutor:
    dialect: Dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        _require_psycopg_transaction(conn)
        self.conn = conn

    def run(self, step: Step) -> Rows:
        sql = query(self.dialect, step.query)
        if step.many:
            with self.conn.cursor() as cur:
                cur.executemany(sql, step.params)
            return []
        return _rows(self.conn.execute(sql, step.params))


class AsyncPsycopgExecutor:
    dialect: Dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        _require_psycopg_transaction(conn)
        self.conn = conn

    async def run(self, step: Step) -> Rows:
        sql = query(self.dialect, step.query)
        async with self.conn.cursor() as cur:
            if step.many:
                await cur.executemany(sql, step.params)
                return []
            await cur.execute(sql, step.params)
            return [tuple(r) for r in await cur.fetchall()] if cur.description else []


def _require_psycopg_transaction(conn: Any) -> None:
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise NoTransaction(
            "psycopg connection is in autocommit mode outside a transaction: "
            "use `with conn.transaction():` so the event commits with your write"
        )


def _sqlalchemy_dialect(sync_conn: Any) -> Dialect:
    name, driver = sync_conn.dialect.name, sync_conn.dialect.driver
    if name == "postgresql" and driver == "psycopg":
        return "postgres"
    if name == "sqlite" and driver in ("pysqlite", "aiosqlite"):
        return "sqlite"
    raise UnsupportedConnection(
        f"SQLAlchemy dialect {name}+{driver} is not supported: use postgresql+psycopg or sqlite"
    )


def _require_sqlalchemy_transaction(sync_conn: Any) -> None:
    if sync_conn._is_autocommit_isolation():
        raise NoTransaction(
            "SQLAlchemy connection uses AUTOCOMMIT isolation: the event could not commit "
            "atomically with your write"
        )


def _params(step: Step) -> Mapping[str, Any] | list[Mapping[str, Any]]:
    if step.many:
        assert not isinstance(step.params, Mapping)
        return list(step.params)
    assert isinstance(step.params, Mapping)
    return step.params


class SqlAlchemyExecutor:
    def __init__(self, conn: Any) -> None:
        _require_sqlalchemy_transaction(conn)
        self.dialect: Dialect = _sqlalchemy_dialect(conn)
        self.conn = conn

    def run(self, step: Step) -> Rows:
        result = self.conn.exec_driver_sql(query(self.dialect, step.query), _params(step))
        return [tuple(r) for r in result.fetchall()] if result.returns_rows else []


class AsyncSqlAlchemyExecutor:
    def __init__(self, conn: Any) -> None:
        _require_sqlalchemy_transaction(conn.sync_connection)
        self.dialect: Dialect = _sqlalchemy_dialect(conn.sync_connection)
        self.conn = conn

    async def run(self, step: Step) -> Rows:
        result = await self.conn.exec_driver_sql(query(self.dialect, step.query), _params(step))
        return [tuple(r) for r in result.fetchall()] if result.returns_rows else []


# --------------------------------------------------------------------------- dispatch


def _supported() -> str:
    return (
        "a SQLAlchemy Session/Connection, a psycopg Connection or an sqlite3 Connection "
        "(async: AsyncSession/AsyncConnection or psycopg AsyncConnection)"
    )


def sync_executor(target: object) -> SyncExecutor:
    if isinstance(target, psycopg.Connection):
        return PsycopgExecutor(target)
    if isinstance(target, sqlite3.Connection):
        return SqliteExecutor(target)
    if isinstance(target, Session):
        if not target.in_transaction() and not target.autobegin:
            raise NoTransaction("SQLAlchemy Session has autobegin off and no transaction begun")
        return SqlAlchemyExecutor(target.connection())
    if isinstance(target, Connection):
        return SqlAlchemyExecutor(target)
    if isinstance(target, psycopg.AsyncConnection | AsyncSession | AsyncConnection):
        raise UnsupportedConnection(
            f"{type(target).__name__} is async: use `await emit_async(...)`"
        )
    raise UnsupportedConnection(f"cannot emit on {type(target).__name__}: pass {_supported()}")


async def async_executor(target: object) -> AsyncExecutor:
    if isinstance(target, psycopg.AsyncConnection):
        return AsyncPsycopgExecutor(target)
    if isinstance(target, AsyncSession):
        if not target.in_transaction() and not target.sync_session.autobegin:
            raise NoTransaction(
                "SQLAlchemy AsyncSession has autobegin off and no transaction begun"
            )
        return AsyncSqlAlchemyExecutor(await target.connection())
    if isinstance(target, AsyncConnection):
        return AsyncSqlAlchemyExecutor(target)
    raise UnsupportedConnection(
        f"cannot emit_async on {type(target).__name__}: pass an AsyncSession, an "
        "AsyncConnection or a psycopg AsyncConnection (sync connections use emit)"
    )


__all__ = [
    "AsyncExecutor",
    "SyncExecutor",
    "async_executor",
    "run_plan",
    "run_plan_async",
    "sync_executor",
    "translate",
]
