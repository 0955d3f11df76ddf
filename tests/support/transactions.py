"""Open a transaction through each kind of connection emit accepts, and write a business row."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from tests.support.db import Backend

SYNC_KINDS = ["driver", "sa_session", "sa_connection"]
ASYNC_KINDS = ["psycopg_async", "sa_async_session", "sa_async_connection"]


def _async_url(backend: Backend) -> str:
    if backend.dialect == "sqlite":
        return f"sqlite+aiosqlite:///{backend.target}"
    return backend.sqlalchemy_url


@contextlib.contextmanager
def sync_tx(backend: Backend, kind: str) -> Iterator[Any]:
    """Yields a connection-like object inside a transaction; commits unless the block raises."""
    if kind == "driver":
        conn = backend.connect()
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
        return
    engine = create_engine(backend.sqlalchemy_url)
    try:
        if kind == "sa_session":
            with Session(engine) as session, session.begin():
                yield session
        elif kind == "sa_connection":
            with engine.begin() as sa_conn:
                yield sa_conn
        else:
            raise ValueError(kind)
    finally:
        engine.dispose()


@contextlib.asynccontextmanager
async def async_tx(backend: Backend, kind: str) -> AsyncIterator[Any]:
    if kind == "psycopg_async":
        import psycopg

        if backend.dialect != "postgres":
            raise ValueError("psycopg is Postgres only")
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
    engine = create_async_engine(_async_url(backend))
    try:
        if kind == "sa_async_session":
            async with AsyncSession(engine) as session, session.begin():
                yield session
        elif kind == "sa_async_connection":
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
    else:
        target.execute(sql, params)


async def insert_order_async(backend: Backend, target: Any, order_id: int) -> None:
    sql, params = backend.sql("test_order_insert"), {"id": order_id, "customer": f"c{order_id}"}
    if isinstance(target, AsyncSession):
        await (await target.connection()).exec_driver_sql(sql, params)
    elif isinstance(target, AsyncConnection):
        await target.exec_driver_sql(sql, params)
    else:
        await target.execute(sql, params)
