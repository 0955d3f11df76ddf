"""Postgres connection pools that come back within seconds of a long outage ending.

psycopg_pool retries a failed connection with a delay that doubles, uncapped, until
reconnect_timeout: with the hour we used to give it, the attempt after a 20-minute outage
could come 17 minutes after the server was back. Here the window is short and, each time
it runs out, a new one starts, so attempts stay a few seconds apart however long the
server is away. Used by the relay's store and consumer_lib's PsycopgAsync.

PostgresPool runs named statements on such a pool (an AsyncExecutor), with the session
settings (outbox_core/pg_session.py) at start-up or, behind a transaction pooler, at the
start of each statement's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_core.database_url import Dialect
from outbox_core.driver_errors import classify
from outbox_core.errors import DatabaseError, SessionSettingsDropped
from outbox_core.executors import (
    AsyncExecutor,
    AsyncPsycopgExecutor,
    Plan,
    Rows,
    Statement,
    run_plan_async,
    translated,
)
from outbox_core.pg_session import PerTransaction, SessionSettings

RECONNECT_WINDOW_S = 10.0  # attempts at about 0, 1, 3, 7 and 10 s, then again
PROBE_TIMEOUT_S = 10.0


async def sweep(pool: AsyncConnectionPool[Any]) -> None:
    """Test the pool's idle connections and replace the dead ones (a restarted server breaks
    them all at once). It also lets a pool that has lost its connections grow again: a new
    reconnection attempt, whose delay starts at one second."""
    if pool.closed:
        return
    with contextlib.suppress(Exception):
        await pool.check()


def reconnecting_pool(
    conninfo: str,
    *,
    max_size: int,
    timeout: float,
    kwargs: dict[str, Any] | None = None,
) -> AsyncConnectionPool[Any]:
    """An unopened pool (open it in the running loop, without waiting: a first
    connection that times out in open(wait=True) closes a psycopg pool for good)."""
    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        timeout=timeout,
        kwargs=kwargs,
        open=False,
        reconnect_timeout=RECONNECT_WINDOW_S,
        reconnect_failed=sweep,
    )


class PostgresPool:
    """An AsyncExecutor over a reconnecting pool, in autocommit: a connection per statement
    (or per plan), so no transaction is ever held open across an await elsewhere.

    checkout_timeout_s: how long a statement waits for a connection before it fails as a
    retriable DatabaseError (the server is away, or every connection is busy).
    A healthy pool's connections are not tested on checkout (a round trip each time); a
    statement that fails on a broken connection fails as retriable, and the pool is swept
    then: every idle connection is tested and the dead ones replaced at once (a restarted
    server breaks them all together), so the retry does not draw another dead one.
    """

    dialect: Dialect = "postgres"

    def __init__(
        self,
        conninfo: str,
        *,
        max_size: int,
        checkout_timeout_s: float = 30.0,
        open_wait_s: float | None = None,
        session: SessionSettings | None = None,
    ) -> None:
        """session: the server settings and connection parameters of every connection
        (the server settings given before the user's own `options`: libpq_options)."""
        self._timeout = checkout_timeout_s
        self._open_wait_s = open_wait_s
        self._conninfo = conninfo
        session = session or SessionSettings()
        self.session = session
        self._local = session.local_settings() if session.per_transaction else None
        self._kwargs = {"autocommit": True, **session.connect_kwargs(conninfo)}
        self.pool = reconnecting_pool(
            conninfo, max_size=max_size, timeout=checkout_timeout_s, kwargs=self._kwargs
        )

    async def open(self) -> None:
        """Start the pool; with open_wait_s, wait that long for a first connection (and
        fail if none comes: a pool that times out so is closed for good). A connection
        refused for good (a pooler refusing a startup parameter, a wrong password) fails
        at once, with its own error, instead of as a timeout after open_wait_s."""
        with translated():
            if self._open_wait_s is None:
                await self.pool.open()
            else:
                await self._probe()
                await self.pool.open(wait=True, timeout=self._open_wait_s)
        if self._open_wait_s is not None and self.session.dropped(await self.settings()):
            await self.pool.close()
            raise SessionSettingsDropped(
                "the server runs none of the session settings given in the options startup "
                "parameter: a connection pooler (PgBouncer with ignore_startup_parameters = "
                "options) dropped them",
                parameter="options",
            )

    async def settings(self) -> Rows:
        """The server settings in force on this pool's statements (name, value)."""
        return await self.run(self.session.show())

    async def _probe(self) -> None:
        """One connection of our own before the pool's, whose errors the pool only logs."""
        assert self._open_wait_s is not None
        try:
            conn = await asyncio.wait_for(
                psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs),
                min(self._open_wait_s, PROBE_TIMEOUT_S),
            )
        except (psycopg.Error, OSError, TimeoutError) as exc:
            error = classify(exc)
            if not error.retriable:
                raise error from exc
            return  # the server is away: the pool waits for it
        await conn.close()

    async def close(self) -> None:
        await self.pool.close()

    def _executor(self, conn: Any) -> AsyncExecutor:
        executor = AsyncPsycopgExecutor(conn)
        return executor if self._local is None else PerTransaction(executor, self._local)

    async def run(self, statement: Statement) -> Rows:
        try:
            with translated():
                async with self.pool.connection(timeout=self._timeout) as conn:
                    return await self._executor(conn).run(statement)
        except DatabaseError as exc:
            await self._sweep(exc)
            raise

    async def run_plan(self, plan: Plan, *, write: bool = False) -> Any:
        """All of the plan's statements on one connection, each committing by itself
        (autocommit): a plan whose writes must commit together states them as one
        statement. `write` matters only to SQLite."""
        try:
            with translated():
                async with self.pool.connection(timeout=self._timeout) as conn:
                    return await run_plan_async(plan, self._executor(conn))
        except DatabaseError as exc:
            await self._sweep(exc)
            raise

    async def _sweep(self, exc: DatabaseError) -> None:
        if exc.retriable:
            await sweep(self.pool)
