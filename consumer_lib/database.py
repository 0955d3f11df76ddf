"""The database side of a consumer: a transaction per Work (one record, or a batch of a
partition's records), with the dedup insert in it.

One Protocol (Database) and four implementations, chosen by what the handler wants:
an AsyncSession (SqlAlchemyAsync: psycopg, asyncpg, aiosqlite or aiomysql underneath), a
sync Session run in a worker thread (SqlAlchemySync: psycopg, psycopg2, sqlite3 or
PyMySQL), a psycopg AsyncConnection from a pool (PsycopgAsync), or Django's connection
inside transaction.atomic() in a worker thread (DjangoSync), so a handler writes with the
ORM.
Each opens one session or connection per Work, never one per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from consumer_lib.dead_letters import DeadLetterRow
from consumer_lib.errors import is_transient
from consumer_lib.work import Handler, Job, Work, run_async, run_sync
from outbox_core.codec import codec_for
from outbox_core.database_url import Dialect
from outbox_core.driver_errors import classify
from outbox_core.executors import (
    AsyncPsycopgExecutor,
    AsyncSqlAlchemyExecutor,
    DjangoExecutor,
    Rows,
    SqlAlchemyExecutor,
    Statement,
    django_driver,
    sqlalchemy_dialect,
)
from outbox_core.logs import url_secrets

__all__ = [
    "Database",
    "DeadLetterRow",
    "DjangoSync",
    "Handler",
    "PsycopgAsync",
    "SqlAlchemyAsync",
    "SqlAlchemySync",
    "Work",
    "is_transient",
]


class Database(Protocol):
    dialect: Dialect
    # Whether handlers must be coroutine functions (checked when they are registered).
    async_handlers: bool

    async def apply_work(self, work: Work) -> None:
        """In one transaction: record the work's event_ids (one statement), run the
        handlers of those recorded now in order, commit; work.applied says which ran.

        Raises what a handler raised, or what the driver raised (the dedup statement's
        failures as outbox_core errors, see is_transient), after rolling back.
        """
        ...

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        """apply_work of one event: False, without running the handler, when the group
        had recorded it. With event_id None the handler runs without dedup."""
        ...

    async def purge(self, group: str, retention_s: float, limit: int) -> int:
        """Delete up to `limit` of the group's rows older than retention_s (other groups'
        rows are theirs to purge, by their own retention); returns how many went."""
        ...

    async def keep_dead_letter(self, letter: DeadLetterRow) -> None:
        """Keep a record its dead-letter topic can never take in consumer_dead_letters
        (once: a second copy of the same record is ignored)."""
        ...

    async def close(self) -> None: ...


class _Adapter:
    """What every adapter does the same way: apply through apply_work, and the
    statements of its own transaction (purge, dead-letter rows) through _execute."""

    dialect: Dialect

    async def apply_work(self, work: Work) -> None:
        raise NotImplementedError

    async def _execute(self, statement: Statement) -> Rows:
        raise NotImplementedError

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        work = Work(group, [Job(event_id, event, call)])
        await self.apply_work(work)
        return work.applied[0]

    async def purge(self, group: str, retention_s: float, limit: int) -> int:
        params = {
            "consumer_group": group,
            "retention_s": codec_for(self.dialect).seconds(retention_s),
            "limit": limit,
        }
        return len(await self._execute(Statement("processed_event_purge", params)))

    async def keep_dead_letter(self, letter: DeadLetterRow) -> None:
        await self._execute(Statement("consumer_dead_letter_insert", letter.params()))

    def secrets(self) -> list[str]:
        """What must never be logged: the database URL and its password."""
        return []


@contextlib.asynccontextmanager
async def _connecting() -> AsyncIterator[None]:
    """Our errors for the socket's: asyncpg under SQLAlchemy raises the OSError of a
    refused or reset connect as it is, which is_transient would take for the handler's
    own call (a failure of the record). Around the adapter's own steps only, never
    around the handler."""
    try:
        yield
    except OSError as exc:
        raise classify(exc) from exc


def _engine_secrets(engine: Any) -> list[str]:
    url = engine.url
    return [
        *url_secrets(url.render_as_string(hide_password=False)),
        *([str(url.password)] if url.password else []),
    ]


class SqlAlchemyAsync(_Adapter):
    """Handlers get an AsyncSession inside `session.begin()`."""

    async_handlers = True

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.ext.asyncio import async_sessionmaker

        self.engine = engine
        self.dialect = sqlalchemy_dialect(engine.sync_engine)
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    def secrets(self) -> list[str]:
        return _engine_secrets(self.engine.sync_engine)

    async def apply_work(self, work: Work) -> None:
        async with self._sessions() as session:
            async with _connecting():
                await session.begin()
                connection = await session.connection()
            # A handler's failure leaves the block: closing the session rolls back.
            await run_async(work, AsyncSqlAlchemyExecutor(connection), session)
            async with _connecting():
                await session.commit()

    async def _execute(self, statement: Statement) -> Rows:
        async with _connecting(), self.engine.begin() as conn:
            return await AsyncSqlAlchemyExecutor(conn).run(statement)

    async def close(self) -> None:
        await self.engine.dispose()


class SqlAlchemySync(_Adapter):
    """Sync handlers get a Session inside `session.begin()`, run in a worker thread."""

    async_handlers = False

    def __init__(self, engine: Any) -> None:
        from sqlalchemy.orm import sessionmaker

        self.engine = engine
        self.dialect = sqlalchemy_dialect(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def secrets(self) -> list[str]:
        return _engine_secrets(self.engine)

    def _apply_work(self, work: Work) -> None:
        with self._sessions() as session, session.begin():
            run_sync(work, SqlAlchemyExecutor(session.connection()), session)

    async def apply_work(self, work: Work) -> None:
        await asyncio.to_thread(self._apply_work, work)

    def _execute_sync(self, statement: Statement) -> Rows:
        with self.engine.begin() as conn:
            return SqlAlchemyExecutor(conn).run(statement)

    async def _execute(self, statement: Statement) -> Rows:
        return await asyncio.to_thread(self._execute_sync, statement)

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)


class PsycopgAsync(_Adapter):
    """Handlers get a psycopg AsyncConnection inside `conn.transaction()` (Postgres)."""

    dialect: Dialect = "postgres"
    async_handlers = True

    def __init__(
        self, conninfo: str, *, max_connections: int = 8, pool_timeout_s: float = 10.0
    ) -> None:
        """pool_timeout_s: how long a transaction waits for a connection (the server away)
        before it fails as a transient error, and the record is retried."""
        # No check on checkout: it cost a round trip per event (0.24 ms of 1.55, see
        # docs/decisions/0021-no-connection-check-on-checkout.md). A connection that broke
        # fails its transaction as a transient error, the record is retried, and the
        # failure path sweeps the pool (_sweep).
        from outbox_core.pg_pool import reconnecting_pool

        self._pool = reconnecting_pool(conninfo, max_size=max_connections, timeout=pool_timeout_s)
        self._conninfo = conninfo

    def secrets(self) -> list[str]:
        return url_secrets(self._conninfo)

    async def _ready(self) -> None:
        # Not open(wait=True): a pool whose first connection times out closes for good, and
        # a consumer started while the database is away would then retry forever in vain.
        # This open returns at once (safe to repeat, and from several tasks); a checkout
        # waits for the first connection, and its timeout is a transient error like any.
        if self._pool.closed:  # not opened yet (a pool closed after use refuses to reopen)
            await self._pool.open()

    async def apply_work(self, work: Work) -> None:
        await self._ready()
        try:
            async with self._pool.connection() as conn, conn.transaction():
                await run_async(work, AsyncPsycopgExecutor(conn), conn)
        except Exception as exc:
            if is_transient(exc):
                await self._sweep()
            raise

    async def _sweep(self) -> None:
        """After a transient failure: the retry and the records after it must not each
        draw one more broken connection."""
        from outbox_core.pg_pool import sweep

        await sweep(self._pool)

    async def _execute(self, statement: Statement) -> Rows:
        await self._ready()
        async with self._pool.connection() as conn, conn.transaction():
            return await AsyncPsycopgExecutor(conn).run(statement)

    async def close(self) -> None:
        await self._pool.close()  # a no-op on a pool never opened


class DjangoSync(_Adapter):
    """Sync handlers get Django's connection (of `using`) inside `transaction.atomic()`,
    run in worker threads of their own: the ORM in a handler writes in the transaction that
    records the event, on the same connection. Postgres backend, psycopg 3 or psycopg2.

    Each worker thread has its own Django connection (Django's connections are per thread),
    checked before every transaction as Django checks one per request: CONN_MAX_AGE and
    CONN_HEALTH_CHECKS apply (with CONN_MAX_AGE=0, Django's default, every transaction
    connects anew; a consumer wants it above 0). Call django.setup() before building it.
    """

    dialect: Dialect = "postgres"
    async_handlers = False

    def __init__(self, using: str = "default", *, max_threads: int = 4) -> None:
        from django.db import connections

        django_driver(connections[using])  # refuses another backend now, not at the first event
        self.using = using
        self._size = max_threads
        self._threads = ThreadPoolExecutor(max_threads, thread_name_prefix=f"outbox-django-{using}")

    def _connection(self) -> Any:
        from django.db import connections

        wrapper = connections[self.using]
        wrapper.close_if_unusable_or_obsolete()
        return wrapper

    def _apply_work(self, work: Work) -> None:
        from django.db import transaction

        wrapper = self._connection()
        with transaction.atomic(using=self.using):
            run_sync(work, DjangoExecutor(wrapper), wrapper)

    async def _in_thread(self, call: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._threads, call, *args)

    async def apply_work(self, work: Work) -> None:
        await self._in_thread(self._apply_work, work)

    def _execute_here(self, statement: Statement) -> Rows:
        from django.db import transaction

        wrapper = self._connection()
        with transaction.atomic(using=self.using):
            return DjangoExecutor(wrapper).run(statement)

    async def _execute(self, statement: Statement) -> Rows:
        rows: Rows = await self._in_thread(self._execute_here, statement)
        return rows

    def _close_own(self, everyone: threading.Barrier) -> None:
        from django.db import connections

        # Every worker thread holds one of these at once, so each closes its own connection.
        with contextlib.suppress(threading.BrokenBarrierError):
            everyone.wait(timeout=30)
        connections[self.using].close()

    async def close(self) -> None:
        everyone = threading.Barrier(self._size)
        await asyncio.gather(
            *(self._in_thread(self._close_own, everyone) for _ in range(self._size))
        )
        self._threads.shutdown(wait=False)
