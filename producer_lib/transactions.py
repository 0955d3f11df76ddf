"""The caller's connection, as an executor that joins its open transaction.

Supported: SQLAlchemy Session, Connection, AsyncSession and AsyncConnection (psycopg 3,
psycopg2, asyncpg, sqlite3, PyMySQL, mysqlclient or aiomysql underneath); a raw psycopg 3
Connection or AsyncConnection, a psycopg2 connection, an asyncpg Connection, an
sqlite3.Connection and a PyMySQL, mysqlclient (MySQLdb) or aiomysql connection (MariaDB,
MySQL); Django's connection (`django.db.connection` or `connections[alias]`, Postgres
backend) inside `transaction.atomic()`. emit never commits, so a connection that would commit each
statement by itself (autocommit, no transaction begun) is refused with NoTransaction: the
event could otherwise commit without the caller's write.

Driver modules are looked up among those already imported: a connection of a driver
nobody imported cannot exist, and a service need not install the drivers it does not use.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from outbox_core.database_url import Dialect, supported
from outbox_core.errors import NoTransaction, UnsupportedConnection
from outbox_core.executors import (
    AiomysqlExecutor,
    AsyncExecutor,
    AsyncpgExecutor,
    AsyncPsycopgExecutor,
    AsyncSqlAlchemyExecutor,
    DjangoExecutor,
    MysqldbExecutor,
    Psycopg2Executor,
    PsycopgExecutor,
    PyMysqlExecutor,
    SqlAlchemyExecutor,
    SqliteExecutor,
    Statement,
    SyncExecutor,
)

# The databases emit writes to.
EMIT_DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite", "mariadb")
# PyMySQL's server_status flag of an open transaction (pymysql.constants.SERVER_STATUS).
_MYSQL_IN_TRANS = 1


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _instance(target: object, module: str, *names: str) -> bool:
    found = _module(module)
    if found is None:
        return False
    return any(isinstance(target, getattr(found, name)) for name in names)


def _require_sqlite_transaction(conn: sqlite3.Connection) -> None:
    autocommit = getattr(conn, "autocommit", None)  # Python 3.12+
    if not conn.in_transaction and (conn.isolation_level is None or autocommit is True):
        raise NoTransaction(
            "sqlite3 connection is in autocommit mode with no open transaction: "
            "run BEGIN first so the event commits with your write"
        )


def _require_psycopg_transaction(conn: Any) -> None:
    idle = _module("psycopg").pq.TransactionStatus.IDLE
    if conn.autocommit and conn.info.transaction_status == idle:
        raise NoTransaction(
            "psycopg connection is in autocommit mode outside a transaction: "
            "use `with conn.transaction():` so the event commits with your write"
        )


def _require_psycopg2_transaction(conn: Any) -> None:
    idle = _module("psycopg2.extensions").TRANSACTION_STATUS_IDLE
    if conn.autocommit and conn.info.transaction_status == idle:
        raise NoTransaction(
            "psycopg2 connection is in autocommit mode outside a transaction: "
            "turn autocommit off (the default) or run BEGIN so the event commits with your write"
        )


def _require_asyncpg_transaction(conn: Any) -> None:
    if not conn.is_in_transaction():
        raise NoTransaction(
            "asyncpg connection has no open transaction (asyncpg commits each statement "
            "otherwise): use `async with conn.transaction():`"
        )


def _mysql_in_transaction(conn: Any) -> bool:
    """Whether a connection in autocommit mode has begun a transaction. PyMySQL and
    aiomysql keep the server's status flags of the last reply; mysqlclient does not expose
    them, so the server is asked (only in autocommit mode, which emit refuses anyway
    unless BEGIN ran)."""
    if _instance(conn, "MySQLdb.connections", "Connection"):
        return bool(MysqldbExecutor(conn).run(Statement("database_in_transaction"))[0][0])
    return bool(conn.server_status & _MYSQL_IN_TRANS)


def _require_mysql_transaction(conn: Any) -> None:
    """PyMySQL, mysqlclient and aiomysql: refused in autocommit mode outside BEGIN, and on
    a connection whose character set is not utf8mb4 (the schema's): another would fail on,
    or silently replace, the characters it cannot encode."""
    if conn.get_autocommit() and not _mysql_in_transaction(conn):
        raise NoTransaction(
            "MySQL connection is in autocommit mode outside a transaction: call "
            "`conn.begin()` (or connect with autocommit off) so the event commits with your write"
        )
    charset = conn.character_set_name()
    if charset != "utf8mb4":
        raise UnsupportedConnection(
            f"MySQL connection uses the character set {charset!r}: connect with "
            "charset='utf8mb4', the outbox's"
        )


def _require_django_transaction(wrapper: Any) -> None:
    if wrapper.get_autocommit() and not wrapper.in_atomic_block:
        raise NoTransaction(
            "Django connection is in autocommit mode outside transaction.atomic(): "
            "emit inside `with transaction.atomic():` so the event commits with your write"
        )


def _require_sqlalchemy_transaction(sync_conn: Any, dialect: Dialect) -> None:
    if sync_conn._is_autocommit_isolation():
        raise NoTransaction(
            "SQLAlchemy connection uses AUTOCOMMIT isolation: the event could not commit "
            "atomically with your write"
        )
    if dialect == "mariadb":
        _require_mysql_transaction(sync_conn.connection.driver_connection)


def _django_wrapper(target: object) -> Any:
    """Django's connection for target, or None. `django.db.connection` is a proxy that
    forwards every attribute to the calling thread's connection of the default alias, so
    it serves as the connection itself."""
    if _instance(target, "django.db.backends.base.base", "BaseDatabaseWrapper") or _instance(
        target, "django.utils.connection", "ConnectionProxy"
    ):
        return target
    return None


def _supported() -> str:
    return (
        "a SQLAlchemy Session/Connection, a psycopg, psycopg2, PyMySQL or MySQLdb "
        "connection, an sqlite3 Connection or Django's connection (async: "
        "AsyncSession/AsyncConnection, a psycopg AsyncConnection, an asyncpg Connection or an "
        "aiomysql connection)"
    )


def _is_async(target: object) -> bool:
    return (
        isinstance(target, AsyncSession | AsyncConnection)
        or _instance(target, "psycopg", "AsyncConnection")
        or _instance(target, "asyncpg", "Connection")
        or _instance(target, "asyncpg.pool", "PoolConnectionProxy")
        or _instance(target, "aiomysql.connection", "Connection")
    )


def sync_executor(target: object) -> SyncExecutor:
    if _instance(target, "psycopg", "Connection"):
        _require_psycopg_transaction(target)
        return PsycopgExecutor(target)
    if _instance(target, "psycopg2.extensions", "connection"):
        _require_psycopg2_transaction(target)
        return Psycopg2Executor(target)
    if isinstance(target, sqlite3.Connection):
        _require_sqlite_transaction(target)
        return SqliteExecutor(target)
    if _instance(target, "pymysql.connections", "Connection"):
        _require_mysql_transaction(target)
        return PyMysqlExecutor(target)
    if _instance(target, "MySQLdb.connections", "Connection"):
        _require_mysql_transaction(target)
        return MysqldbExecutor(target)
    if isinstance(target, Session):
        if not target.in_transaction() and not target.autobegin:
            raise NoTransaction("SQLAlchemy Session has autobegin off and no transaction begun")
        target = target.connection()
    if isinstance(target, Connection):
        executor = SqlAlchemyExecutor(target)  # refuses an unsupported dialect first
        supported(executor.dialect, "producer_lib", EMIT_DIALECTS)
        _require_sqlalchemy_transaction(target, executor.dialect)
        return executor
    wrapper = _django_wrapper(target)
    if wrapper is not None:
        django_executor = DjangoExecutor(wrapper)  # refuses other backends first
        _require_django_transaction(wrapper)
        return django_executor
    if _is_async(target):
        raise UnsupportedConnection(
            f"{type(target).__name__} is async: use `await emit_async(...)`"
        )
    raise UnsupportedConnection(f"cannot emit on {type(target).__name__}: pass {_supported()}")


async def async_executor(target: object) -> AsyncExecutor:
    if _instance(target, "psycopg", "AsyncConnection"):
        _require_psycopg_transaction(target)
        return AsyncPsycopgExecutor(target)
    if _instance(target, "asyncpg", "Connection") or _instance(
        target, "asyncpg.pool", "PoolConnectionProxy"
    ):
        _require_asyncpg_transaction(target)
        return AsyncpgExecutor(target)
    if _instance(target, "aiomysql.connection", "Connection"):
        _require_mysql_transaction(target)
        return AiomysqlExecutor(target)
    if isinstance(target, AsyncSession):
        if not target.in_transaction() and not target.sync_session.autobegin:
            raise NoTransaction(
                "SQLAlchemy AsyncSession has autobegin off and no transaction begun"
            )
        target = await target.connection()
    if isinstance(target, AsyncConnection):
        executor = AsyncSqlAlchemyExecutor(target)
        supported(executor.dialect, "producer_lib", EMIT_DIALECTS)
        _require_sqlalchemy_transaction(target.sync_connection, executor.dialect)
        return executor
    raise UnsupportedConnection(
        f"cannot emit_async on {type(target).__name__}: pass an AsyncSession, an "
        "AsyncConnection, a psycopg AsyncConnection, an asyncpg Connection or an aiomysql "
        "connection (sync connections use emit)"
    )
