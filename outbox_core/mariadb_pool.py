"""A MariaDB connection pool that runs named statements (an AsyncExecutor): aiomysql's pool
(docs/decisions/0026-mariadb-drivers.md), its connections in autocommit, in UTC, at READ
COMMITTED, with the caller's lock wait and statement timeouts (database.sql,
session_init_relay). Used by the relay's store.

A statement commits by itself; a plan that writes runs in one transaction (MariaDB has no
UPDATE ... RETURNING nor data-modifying CTEs, so what Postgres writes as one statement is
written here as steps that must commit together). A connection that failed is closed,
never handed out again: the next statement gets a new one, so a restarted server costs one
retriable error per connection in use, not a pool of dead ones.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from outbox_core.database_url import Dialect, MariadbTarget
from outbox_core.driver_errors import classify
from outbox_core.errors import DatabaseError, OutboxError
from outbox_core.executors import AiomysqlExecutor, Plan, Rows, Statement, run_plan_async
from outbox_core.queries import query

RECONNECT_PAUSE_S = 1.0
CLOSE_WAIT_S = 5.0


def session_init(lock_wait_s: float, statement_s: float, replica: str | None = None) -> str:
    """The init_command of the relay's connections (one statement, run by the driver
    before anything else, so it takes no parameters: the values are rendered here, the
    replica id as an escaped string literal)."""
    from pymysql.converters import escape_item

    params = {
        # innodb_lock_wait_timeout counts whole seconds, 1 at least.
        "lock_wait_s": max(1, math.ceil(lock_wait_s)),
        "statement_s": float(statement_s),
        "replica": replica,
    }
    rendered = {name: escape_item(value, "utf8mb4") for name, value in params.items()}
    sql: str = query("mariadb", "session_init_relay") % rendered
    return sql


class MariadbPool:
    """checkout_timeout_s: how long a statement waits for a connection before it fails as a
    retriable DatabaseError (the server is away, or every connection is busy)."""

    dialect: Dialect = "mariadb"

    def __init__(
        self,
        url: str,
        *,
        max_size: int,
        checkout_timeout_s: float = 30.0,
        open_wait_s: float | None = None,
        init_command: str | None = None,
    ) -> None:
        self._target = MariadbTarget.parse(url)
        self._max_size = max_size
        self._timeout = checkout_timeout_s
        self._open_wait_s = open_wait_s
        self._init_command = init_command or query("mariadb", "session_init")
        self._pool: Any = None

    async def open(self) -> None:
        """Connect; with open_wait_s, keep trying that long while the server is away. A
        connection refused for good (a wrong password, no such database) fails at once."""
        deadline = time.monotonic() + (self._open_wait_s or 0.0)
        while True:
            try:
                self._pool = await self._create()
                return
            except Exception as exc:
                error = classify(exc)
                if not error.retriable or time.monotonic() >= deadline:
                    raise error from exc
            await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _create(self) -> Any:
        import aiomysql

        return await aiomysql.create_pool(
            minsize=1,
            maxsize=self._max_size,
            **self._target.login(),
            db=self._target.database,
            autocommit=True,
            init_command=self._init_command,
            connect_timeout=self._timeout,
        )

    async def close(self) -> None:
        """Waits up to CLOSE_WAIT_S for the connections in use to come back, then closes
        the ones still out: aiomysql's own close waits for every connection, and one that
        was never given back would keep the relay from stopping."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.close()
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await pool.wait_closed()
        except TimeoutError:
            pool.terminate()

    async def _acquire(self) -> Any:
        if self._pool is None:
            raise DatabaseError("the MariaDB pool is not open", retriable=False)
        try:
            # Not asyncio.wait_for: in Python 3.11 it checks out in a task of its own and,
            # when the caller is cancelled just as that task got a connection, returns the
            # connection and swallows the cancellation, so a relay told to stop goes on.
            async with asyncio.timeout(self._timeout):
                return await self._pool.acquire()
        except TimeoutError:
            raise DatabaseError(
                f"no MariaDB connection within {self._timeout:g} s", retriable=True
            ) from None
        except Exception as exc:
            # A new connection refused (the server restarting) is the driver's error too:
            # translated here as a statement's is, or it would pass the store untranslated
            # and a lease round would end in its supervisor instead of "heartbeat failed".
            raise classify(exc) from exc

    async def run(self, statement: Statement) -> Rows:
        rows: Rows = await self.run_plan(_single(statement))
        return rows

    async def run_plan(self, plan: Plan, *, write: bool = False) -> Any:
        """All of the plan's statements on one connection; with write, in one transaction
        that commits when the plan returns and rolls back if it fails. The transaction
        opens with the plan's first statement, in its round trip, and commits with the
        statement marked commit, in its, or else after the plan (AiomysqlExecutor)."""
        pool = self._pool
        conn = await self._acquire()
        try:
            result = await run_plan_async(plan, AiomysqlExecutor(conn, begin=write))
            if write and conn.get_transaction_status():
                await conn.commit()
            return result
        except BaseException as exc:
            # Whatever failed, the connection may be broken or mid-transaction: closing it
            # ends the transaction on the server too (a rollback by disconnect).
            conn.close()
            if isinstance(exc, OutboxError | asyncio.CancelledError):
                raise
            if isinstance(exc, Exception):
                raise classify(exc) from exc
            raise
        finally:
            pool.release(conn)


def _single(statement: Statement) -> Plan:
    return (yield statement)
