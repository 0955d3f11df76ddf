"""The database side of a consumer: a transaction per record, with the dedup insert in it.

One Protocol (Database) and three implementations, chosen by what the handler wants:
an AsyncSession (SqlAlchemyAsync), a sync Session run in a worker thread
(SqlAlchemySync), or a psycopg AsyncConnection from a pool (PsycopgAsync).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from producer_lib.queries import Dialect, query

# handler(event, session) -> None or awaitable
Handler = Callable[[Any, Any], Any]


class Database(Protocol):
    dialect: Dialect

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        """In one transaction: record (group, event_id), run the handler, commit.

        Returns False, without running the handler, when the pair was already recorded.
        With event_id None the handler runs without dedup. Raises what the handler or the
        driver raised, after rolling back.
        """
        ...

    async def purge(self, retention_s: float, limit: int) -> int: ...

    async def close(self) -> None: ...


def _dialect_of(sync_engine_or_conn: Any) -> Dialect:
    name = sync_engine_or_conn.dialect.name
    if name == "postgresql":
        return "postgres"
    if name == "sqlite":
        return "sqlite"
    raise ValueError(f"unsupported database {name}: use Postgres (psycopg) or SQLite")


def _dedup_params(group: str, event_id: str) -> dict[str, Any]:
    return {"consumer_group": group, "event_id": event_id}


class SqlAlchemyAsync:
    """Handlers get an AsyncSession inside `session.begin()`."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.ext.asyncio import async_sessionmaker

        self.engine = engine
        self.dialect = _dialect_of(engine.sync_engine)
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        async with self._sessions() as session, session.begin():
            if event_id is not None:
                conn = await session.connection()
                result = await conn.exec_driver_sql(
                    query(self.dialect, "processed_event_insert"),
                    _dedup_params(group, event_id),
                )
                if result.first() is None:
                    return False
            outcome = call(event, session)
            if isinstance(outcome, Awaitable):
                await outcome
        return True

    async def purge(self, retention_s: float, limit: int) -> int:
        async with self.engine.begin() as conn:
            result = await conn.exec_driver_sql(
                query(self.dialect, "processed_event_purge"),
                {"retention_s": _seconds(self.dialect, retention_s), "limit": limit},
            )
            return int(result.rowcount)

    async def close(self) -> None:
        await self.engine.dispose()


class SqlAlchemySync:
    """Sync handlers get a Session inside `session.begin()`, run in a worker thread."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.orm import sessionmaker

        self.engine = engine
        self.dialect = _dialect_of(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def _apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        with self._sessions() as session, session.begin():
            if event_id is not None:
                result = session.connection().exec_driver_sql(
                    query(self.dialect, "processed_event_insert"),
                    _dedup_params(group, event_id),
                )
                if result.first() is None:
                    return False
            call(event, session)
        return True

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        return await asyncio.to_thread(self._apply, group, event_id, call, event)

    def _purge(self, retention_s: float, limit: int) -> int:
        with self.engine.begin() as conn:
            result = conn.exec_driver_sql(
                query(self.dialect, "processed_event_purge"),
                {"retention_s": _seconds(self.dialect, retention_s), "limit": limit},
            )
            return int(result.rowcount)

    async def purge(self, retention_s: float, limit: int) -> int:
        return await asyncio.to_thread(self._purge, retention_s, limit)

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)


class PsycopgAsync:
    """Handlers get a psycopg AsyncConnection inside `conn.transaction()` (Postgres)."""

    dialect: Dialect = "postgres"

    def __init__(
        self, conninfo: str, *, max_connections: int = 8, pool_timeout_s: float = 10.0
    ) -> None:
        """pool_timeout_s: how long a transaction waits for a connection (the server away)
        before it fails as a transient error, and the record is retried."""
        from relay.pg_pool import reconnecting_pool

        # No check on checkout: it costs a round trip per event (0.24 ms of 1.55 here, see
        # docs/benchmarks.md). A connection that broke fails its transaction as a transient
        # error, the record is retried, and the failure path sweeps the pool (_sweep).
        self._pool = reconnecting_pool(conninfo, max_size=max_connections, timeout=pool_timeout_s)

    async def _ready(self) -> None:
        # Not open(wait=True): a pool whose first connection times out closes for good, and
        # a consumer started while the database is away would then retry forever in vain.
        # This open returns at once (safe to repeat, and from several tasks); a checkout
        # waits for the first connection, and its timeout is a transient error like any.
        if self._pool.closed:  # not opened yet (a pool closed after use refuses to reopen)
            await self._pool.open()

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        await self._ready()
        try:
            async with self._pool.connection() as conn, conn.transaction():
                if event_id is not None:
                    cur = await conn.execute(
                        query("postgres", "processed_event_insert"),
                        _dedup_params(group, event_id),
                    )
                    if await cur.fetchone() is None:
                        return False
                outcome = call(event, conn)
                if isinstance(outcome, Awaitable):
                    await outcome
        except Exception as exc:
            if is_transient(exc):
                await self._sweep()
            raise
        return True

    async def _sweep(self) -> None:
        """After a transient failure (a server restart breaks every idle connection at
        once): test the idle connections and replace the dead ones, so the retry and the
        records after it do not each draw one more broken connection."""
        with contextlib.suppress(Exception):
            await self._pool.check()

    async def purge(self, retention_s: float, limit: int) -> int:
        await self._ready()
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                query("postgres", "processed_event_purge"),
                {"retention_s": retention_s, "limit": limit},
            )
            return int(cur.rowcount)

    async def close(self) -> None:
        await self._pool.close()  # a no-op on a pool never opened


def _seconds(dialect: Dialect, value: float) -> Any:
    # SQLite builds its time modifier from text.
    return f"{value:.3f}" if dialect == "sqlite" else value


def is_transient(exc: BaseException) -> bool:
    """A database or network failure that a later retry may get past (not the record's fault)."""
    from consumer_lib.errors import TransientError

    if isinstance(exc, TransientError | ConnectionError | TimeoutError):
        return True
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None:
        if isinstance(
            exc, psycopg.OperationalError | psycopg.InterfaceError | psycopg_pool.PoolTimeout
        ):
            return True
        if isinstance(exc, psycopg.Error):
            state = exc.sqlstate or ""
            return state.startswith("08") or state in (
                "40001",
                "40P01",
                "57P01",
                "57P02",
                "57P03",
                "53300",
            )
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return exc.orig is not None and is_transient(exc.orig)
    if isinstance(exc, sa_exc.TimeoutError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        return "locked" in text or "busy" in text
    return False
