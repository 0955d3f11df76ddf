"""The database side of a consumer: a transaction per record, with the dedup insert in it.

One Protocol (Database) and three implementations, chosen by what the handler wants:
an AsyncSession (SqlAlchemyAsync), a sync Session run in a worker thread
(SqlAlchemySync), or a psycopg AsyncConnection from a pool (PsycopgAsync).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from consumer_lib.errors import is_transient
from outbox_core.codec import codec_for
from outbox_core.database_url import Dialect
from outbox_core.executors import (
    AsyncPsycopgExecutor,
    AsyncSqlAlchemyExecutor,
    SqlAlchemyExecutor,
    Statement,
    sqlalchemy_dialect,
)
from outbox_core.pg_pool import reconnecting_pool, sweep

__all__ = [
    "Database",
    "Handler",
    "PsycopgAsync",
    "SqlAlchemyAsync",
    "SqlAlchemySync",
    "is_transient",
]

# handler(event, session) -> None or awaitable
Handler = Callable[[Any, Any], Any]


class Database(Protocol):
    dialect: Dialect

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        """In one transaction: record (group, event_id), run the handler, commit.

        Returns False, without running the handler, when the pair was already recorded.
        With event_id None the handler runs without dedup. Raises what the handler raised,
        or what the driver raised (the dedup statement's failures as outbox_core errors,
        see is_transient), after rolling back.
        """
        ...

    async def purge(self, retention_s: float, limit: int) -> int: ...

    async def close(self) -> None: ...


def _dedup(group: str, event_id: str) -> Statement:
    """Returns a row the first time the group records the event, none for a duplicate."""
    return Statement("processed_event_insert", {"consumer_group": group, "event_id": event_id})


def _purge(dialect: Dialect, retention_s: float, limit: int) -> Statement:
    """Deletes up to `limit` rows older than retention_s; one row back per row deleted."""
    params = {"retention_s": codec_for(dialect).seconds(retention_s), "limit": limit}
    return Statement("processed_event_purge", params)


class SqlAlchemyAsync:
    """Handlers get an AsyncSession inside `session.begin()`."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.ext.asyncio import async_sessionmaker

        self.engine = engine
        self.dialect = sqlalchemy_dialect(engine.sync_engine)
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        async with self._sessions() as session, session.begin():
            if event_id is not None:
                executor = AsyncSqlAlchemyExecutor(await session.connection())
                if not await executor.run(_dedup(group, event_id)):
                    return False
            outcome = call(event, session)
            if isinstance(outcome, Awaitable):
                await outcome
        return True

    async def purge(self, retention_s: float, limit: int) -> int:
        async with self.engine.begin() as conn:
            executor = AsyncSqlAlchemyExecutor(conn)
            return len(await executor.run(_purge(self.dialect, retention_s, limit)))

    async def close(self) -> None:
        await self.engine.dispose()


class SqlAlchemySync:
    """Sync handlers get a Session inside `session.begin()`, run in a worker thread."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.orm import sessionmaker

        self.engine = engine
        self.dialect = sqlalchemy_dialect(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def _apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        with self._sessions() as session, session.begin():
            if event_id is not None:
                executor = SqlAlchemyExecutor(session.connection())
                if not executor.run(_dedup(group, event_id)):
                    return False
            call(event, session)
        return True

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        return await asyncio.to_thread(self._apply, group, event_id, call, event)

    def _purge(self, retention_s: float, limit: int) -> int:
        with self.engine.begin() as conn:
            return len(SqlAlchemyExecutor(conn).run(_purge(self.dialect, retention_s, limit)))

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
                    executor = AsyncPsycopgExecutor(conn)
                    if not await executor.run(_dedup(group, event_id)):
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
        """After a transient failure: the retry and the records after it must not each
        draw one more broken connection."""
        await sweep(self._pool)

    async def purge(self, retention_s: float, limit: int) -> int:
        await self._ready()
        async with self._pool.connection() as conn, conn.transaction():
            executor = AsyncPsycopgExecutor(conn)
            return len(await executor.run(_purge(self.dialect, retention_s, limit)))

    async def close(self) -> None:
        await self._pool.close()  # a no-op on a pool never opened
