"""An AsyncExecutor on SQLite: one connection, used only from one dedicated thread.

sqlite3 is synchronous; running every call on one worker thread keeps the event loop free
and the connection on the thread it belongs to. Writes that must commit together run as
one plan under BEGIN IMMEDIATE (SQLite's single writer lock).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from outbox_core.database_url import SQLITE_BUSY_TIMEOUT_S, Dialect
from outbox_core.errors import DatabaseError
from outbox_core.executors import Plan, Rows, SqliteExecutor, Statement, run_plan, translated

T = TypeVar("T")


class SqliteThread:
    dialect: Dialect = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._executor: SqliteExecutor | None = None

    async def _call(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        with translated():
            return await loop.run_in_executor(self._thread, fn)

    def _db(self) -> SqliteExecutor:
        if self._executor is None:
            raise DatabaseError("the SQLite database is not open", retriable=False)
        return self._executor

    async def open(self) -> None:
        def connect() -> None:
            conn = sqlite3.connect(
                self.path,
                timeout=SQLITE_BUSY_TIMEOUT_S,
                isolation_level=None,  # statements autocommit unless a plan begins one
                check_same_thread=False,
            )
            self._executor = SqliteExecutor(conn)
            self._executor.run(Statement("database_wal_enable"))

        await self._call(connect)

    async def close(self) -> None:
        def close() -> None:
            if self._executor is not None:
                self._executor.conn.close()
                self._executor = None

        await self._call(close)
        self._thread.shutdown(wait=True)

    async def run(self, statement: Statement) -> Rows:
        return await self._call(lambda: self._db().run(statement))

    async def run_plan(self, plan: Plan, *, write: bool = False) -> Any:
        """The whole plan on the thread; with write, inside BEGIN IMMEDIATE ... COMMIT
        (rolled back when the plan raises)."""

        def body() -> Any:
            db = self._db()
            if not write:
                return run_plan(plan, db)
            db.run(Statement("database_begin_immediate"))
            try:
                result = run_plan(plan, db)
            except BaseException:
                db.run(Statement("database_rollback"))
                raise
            db.run(Statement("database_commit"))
            return result

        return await self._call(body)
