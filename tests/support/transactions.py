"""Open a transaction through each kind of connection emit accepts, and write a business row.

A kind names a driver and how it is reached: raw ("driver" is the dialect's own: psycopg 3,
sqlite3 or PyMySQL; "psycopg2", "asyncpg", "mysqldb" (mysqlclient), "aiomysql") or through
SQLAlchemy ("sa_*"; the driver in the name when it is not the dialect's default; MariaDB's
async default is aiomysql). A kind of one database's driver skips on the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from tests.support import mariadb
from tests.support.db import Backend

SYNC_KINDS = [
    "driver",
    "sa_session",
    "sa_connection",
    "psycopg2",
    "sa_psycopg2_session",
    "sa_psycopg2_connection",
    "mysqldb",
    "sa_mysqldb_session",
    "sa_mysqldb_connection",
]
ASYNC_KINDS = [
    "psycopg_async",
    "sa_async_session",
    "sa_async_connection",
    "asyncpg",
    "asyncpg_pool",
    "sa_asyncpg_session",
    "sa_asyncpg_connection",
    "aiomysql",
]
# SQLAlchemy's driver name in a kind -> the URL scheme that selects it.
_SA_DRIVERS = {"psycopg2": "postgresql+psycopg2://", "asyncpg": "postgresql+asyncpg://"}
# The same on MariaDB: SQLAlchemy's driver names.
_SA_MARIADB_DRIVERS = ("mysqldb",)


def _names_driver(kind: str, drivers: Iterable[str]) -> bool:
    return any(f"_{driver}_" in kind for driver in drivers)


def postgres_only(kind: str) -> bool:
    return kind in ("psycopg_async", "psycopg2", "asyncpg", "asyncpg_pool") or _names_driver(
        kind, _SA_DRIVERS
    )


def mariadb_only(kind: str) -> bool:
    return kind in ("mysqldb", "aiomysql") or _names_driver(kind, _SA_MARIADB_DRIVERS)


def skip_unsupported(backend: Backend, kind: str) -> None:
    if backend.dialect != "postgres" and postgres_only(kind):
        pytest.skip(f"{kind} is Postgres only")
    if backend.dialect != "mariadb" and mariadb_only(kind):
        pytest.skip(f"{kind} is MariaDB only")


def sqlalchemy_url(backend: Backend, kind: str = "", *, asynchronous: bool = False) -> str:
    """The backend's SQLAlchemy URL for the driver a kind names (psycopg 3 / sqlite3 /
    aiosqlite / PyMySQL / aiomysql when it names none)."""
    for driver, scheme in _SA_DRIVERS.items():
        if f"_{driver}_" in kind:
            return backend.target.replace("postgresql://", scheme, 1)
    for driver in _SA_MARIADB_DRIVERS:
        if f"_{driver}_" in kind:
            return mariadb.sqlalchemy_url(backend.target, driver)
    if asynchronous:
        return backend.async_sqlalchemy_url
    return backend.sqlalchemy_url


def connect_psycopg2(backend: Backend) -> Any:
    """A psycopg2 connection (not in autocommit: its first statement begins)."""
    import psycopg2

    return psycopg2.connect(backend.target)


def connect_mysqldb(backend: Backend, **options: Any) -> Any:
    """A mysqlclient (MySQLdb) connection (autocommit off: its first statement begins)."""
    import MySQLdb

    from outbox_core.database_url import MariadbTarget

    target = MariadbTarget.parse(backend.target)
    # mysqlclient takes a socket path or nothing at all, never None.
    login = {name: value for name, value in target.login().items() if value is not None}
    return MySQLdb.connect(**{**login, "database": target.database, **options})


async def connect_aiomysql(backend: Backend) -> Any:
    """An aiomysql connection (autocommit off: its first statement begins)."""
    import aiomysql  # type: ignore[import-untyped, import-not-found, unused-ignore]

    from scripts.service_mariadb import mariadb_login

    login = mariadb_login(backend.target)
    return await aiomysql.connect(
        host=login.host,
        port=login.port,
        user=login.user,
        password=login.password,
        db=login.database,
        charset="utf8mb4",
    )


# The raw sync kinds: how each connects.
RAW_SYNC: dict[str, Callable[[Backend], Any]] = {
    "driver": Backend.connect,
    "psycopg2": connect_psycopg2,
    "mysqldb": connect_mysqldb,
}


@contextlib.contextmanager
def sync_tx(backend: Backend, kind: str) -> Iterator[Any]:
    """Yields a connection-like object inside a transaction; commits unless the block raises."""
    skip_unsupported(backend, kind)
    if kind in RAW_SYNC:
        conn = RAW_SYNC[kind](backend)
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
        return
    engine = create_engine(sqlalchemy_url(backend, kind))
    try:
        if kind.endswith("session"):
            with Session(engine) as session, session.begin():
                yield session
        elif kind.endswith("connection"):
            with engine.begin() as sa_conn:
                yield sa_conn
        else:
            raise ValueError(kind)
    finally:
        engine.dispose()


@contextlib.asynccontextmanager
async def async_tx(backend: Backend, kind: str) -> AsyncIterator[Any]:
    skip_unsupported(backend, kind)
    if kind == "psycopg_async":
        import psycopg

        conn = await psycopg.AsyncConnection.connect(backend.target)
        try:
            yield conn
            await conn.commit()
        except BaseException:
            await conn.rollback()
            raise
        finally:
            await conn.close()
        return
    if kind == "aiomysql":
        conn = await connect_aiomysql(backend)
        try:
            yield conn
            await conn.commit()
        except BaseException:
            await conn.rollback()
            raise
        finally:
            conn.close()
        return
    if kind == "asyncpg":
        import asyncpg

        raw = await asyncpg.connect(backend.target)
        try:
            async with raw.transaction():
                yield raw
        finally:
            await raw.close()
        return
    if kind == "asyncpg_pool":  # a pool's connections are proxies, not asyncpg.Connection
        import asyncpg

        pool = await asyncpg.create_pool(backend.target, min_size=1, max_size=1)
        try:
            async with pool.acquire() as pooled, pooled.transaction():
                yield pooled
        finally:
            await pool.close()
        return
    engine = create_async_engine(sqlalchemy_url(backend, kind, asynchronous=True))
    try:
        if kind.endswith("session"):
            async with AsyncSession(engine) as session, session.begin():
                yield session
        elif kind.endswith("connection"):
            async with engine.begin() as sa_conn:
                yield sa_conn
        else:
            raise ValueError(kind)
    finally:
        await engine.dispose()


def insert_order(backend: Backend, target: Any, order_id: int) -> None:
    """The caller's own business write, through the same connection emit uses."""
    sql, params = backend.sql("test_order_insert"), {"id": order_id, "customer": f"c{order_id}"}
    if isinstance(target, Session):
        target.connection().exec_driver_sql(sql, params)
    elif hasattr(target, "exec_driver_sql"):
        target.exec_driver_sql(sql, params)
    elif type(target).__module__.startswith(("psycopg2", "pymysql", "MySQLdb")):
        with target.cursor() as cur:
            cur.execute(sql, params)
    else:
        target.execute(sql, params)


async def insert_order_async(backend: Backend, target: Any, order_id: int) -> None:
    sql, params = backend.sql("test_order_insert"), {"id": order_id, "customer": f"c{order_id}"}
    if isinstance(target, AsyncSession):
        target = await target.connection()
    if isinstance(target, AsyncConnection):
        if target.dialect.driver == "asyncpg":
            from outbox_core.queries import to_numbered

            numbered = to_numbered(sql)
            await target.exec_driver_sql(numbered.sql, tuple(params[n] for n in numbered.names))
        else:
            await target.exec_driver_sql(sql, params)
    elif type(target).__module__.startswith("asyncpg"):
        from outbox_core.queries import to_numbered

        numbered = to_numbered(sql)
        await target.execute(numbered.sql, *(params[n] for n in numbered.names))
    elif type(target).__module__.startswith("aiomysql"):
        async with target.cursor() as cur:
            await cur.execute(sql, params)
    else:
        await target.execute(sql, params)
