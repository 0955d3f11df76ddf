"""The caller's connection, as an executor that joins its open transaction.

Supported: SQLAlchemy Session, Connection, AsyncSession and AsyncConnection (psycopg 3 or
sqlite3 underneath), a raw psycopg 3 Connection or AsyncConnection, and sqlite3.Connection.
emit never commits, so a connection that would commit each statement by itself
(autocommit, no transaction begun) is refused with NoTransaction: the event could
otherwise commit without the caller's write.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from outbox_core.errors import NoTransaction, UnsupportedConnection
from outbox_core.executors import (
    AsyncExecutor,
    AsyncPsycopgExecutor,
    AsyncSqlAlchemyExecutor,
    PsycopgExecutor,
    SqlAlchemyExecutor,
    SqliteExecutor,
    SyncExecutor,
)


def _require_sqlite_transaction(conn: sqlite3.Connection) -> None:
    autocommit = getattr(conn, "autocommit", None)  # Python 3.12+
    if not conn.in_transaction and (conn.isolation_level is None or autocommit is True):
        raise NoTransaction(
            "sqlite3 connection is in autocommit mode with no open transaction: "
            "run BEGIN first so the event commits with your write"
        )


def _require_psycopg_transaction(conn: Any) -> None:
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise NoTransaction(
            "psycopg connection is in autocommit mode outside a transaction: "
            "use `with conn.transaction():` so the event commits with your write"
        )


def _require_sqlalchemy_transaction(sync_conn: Any) -> None:
    if sync_conn._is_autocommit_isolation():
        raise NoTransaction(
            "SQLAlchemy connection uses AUTOCOMMIT isolation: the event could not commit "
            "atomically with your write"
        )


def _supported() -> str:
    return (
        "a SQLAlchemy Session/Connection, a psycopg Connection or an sqlite3 Connection "
        "(async: AsyncSession/AsyncConnection or psycopg AsyncConnection)"
    )


def sync_executor(target: object) -> SyncExecutor:
    if isinstance(target, psycopg.Connection):
        _require_psycopg_transaction(target)
        return PsycopgExecutor(target)
    if isinstance(target, sqlite3.Connection):
        _require_sqlite_transaction(target)
        return SqliteExecutor(target)
    if isinstance(target, Session):
        if not target.in_transaction() and not target.autobegin:
            raise NoTransaction("SQLAlchemy Session has autobegin off and no transaction begun")
        target = target.connection()
    if isinstance(target, Connection):
        executor = SqlAlchemyExecutor(target)  # refuses an unsupported dialect first
        _require_sqlalchemy_transaction(target)
        return executor
    if isinstance(target, psycopg.AsyncConnection | AsyncSession | AsyncConnection):
        raise UnsupportedConnection(
            f"{type(target).__name__} is async: use `await emit_async(...)`"
        )
    raise UnsupportedConnection(f"cannot emit on {type(target).__name__}: pass {_supported()}")


async def async_executor(target: object) -> AsyncExecutor:
    if isinstance(target, psycopg.AsyncConnection):
        _require_psycopg_transaction(target)
        return AsyncPsycopgExecutor(target)
    if isinstance(target, AsyncSession):
        if not target.in_transaction() and not target.sync_session.autobegin:
            raise NoTransaction(
                "SQLAlchemy AsyncSession has autobegin off and no transaction begun"
            )
        target = await target.connection()
    if isinstance(target, AsyncConnection):
        executor = AsyncSqlAlchemyExecutor(target)
        _require_sqlalchemy_transaction(target.sync_connection)
        return executor
    raise UnsupportedConnection(
        f"cannot emit_async on {type(target).__name__}: pass an AsyncSession, an "
        "AsyncConnection or a psycopg AsyncConnection (sync connections use emit)"
    )
