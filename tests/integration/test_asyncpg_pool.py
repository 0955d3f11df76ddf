"""The relay's asyncpg pool (outbox_core/asyncpg_pool.py) against a real Postgres: what it
does when every connection is busy, and when the server goes away and comes back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from outbox_core.asyncpg_pool import AsyncpgPool
from outbox_core.errors import DatabaseError
from outbox_core.executors import Statement
from outbox_core.queries import parse_blocks
from tests.support.db import Backend
from tests.support.ops import TcpGate
from tests.support.waits import until

pytestmark = pytest.mark.integration

POOLER_SQL = parse_blocks(
    (Path(__file__).parents[1] / "support" / "sql" / "pooler.sql").read_text(), "pooler.sql"
)
SHARD_MAX = Statement("outbox_shard_max")  # reads outbox_events: waits behind a table lock


@contextlib.contextmanager
def table_locked(pg: Backend) -> Iterator[None]:
    """outbox_events locked (ACCESS EXCLUSIVE) by another session until the block ends."""
    with psycopg.connect(pg.target) as conn:
        conn.execute(POOLER_SQL["pooler_lock_outbox"])
        yield
        conn.rollback()


@contextlib.asynccontextmanager
async def pool_on(
    url: str, max_size: int = 1, checkout_timeout_s: float = 30.0
) -> AsyncIterator[AsyncpgPool]:
    pool = AsyncpgPool(url, max_size=max_size, checkout_timeout_s=checkout_timeout_s)
    await pool.open()
    try:
        yield pool
    finally:
        await pool.close()


async def waiting_on_the_lock(pg: Backend) -> None:
    def waits() -> bool:
        with psycopg.connect(pg.target, autocommit=True) as conn:
            row = conn.execute(POOLER_SQL["pooler_lock_waiters"]).fetchone()
            return bool(row and row[0])

    await until(waits, 30, "a statement waiting on the lock", blocking=True)


def through(gate: TcpGate, url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(server(url), gate.address)))


def server(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


async def test_a_checkout_with_every_connection_busy_fails_retriable_after_its_timeout(
    pg: Backend,
) -> None:
    async with pool_on(pg.target, max_size=1, checkout_timeout_s=0.3) as pool:
        with table_locked(pg):
            first = asyncio.create_task(pool.run(SHARD_MAX))
            await waiting_on_the_lock(pg)
            with pytest.raises(DatabaseError, match="no database connection free") as caught:
                async with asyncio.timeout(30):  # a checkout that never gives up: fail, not hang
                    await pool.run(SHARD_MAX)
            assert caught.value.retriable
        assert await first == [(-1,)]


async def test_after_the_server_comes_back_the_first_statement_succeeds(pg: Backend) -> None:
    """The server away (its connections reset, new ones refused), then back: a statement
    fails as retriable meanwhile, and the first one after draws no dead connection."""
    gate = TcpGate(server(pg.target))
    await gate.open()
    url = through(gate, pg.target)
    try:
        async with pool_on(url, max_size=2, checkout_timeout_s=5) as pool:
            # Two connections, both left idle.
            await asyncio.gather(pool.run(SHARD_MAX), pool.run(SHARD_MAX))
            gate.cut()
            with pytest.raises(DatabaseError) as caught:
                await pool.run(SHARD_MAX)
            assert caught.value.retriable
            await gate.open()
            assert await pool.run(SHARD_MAX) == [(-1,)]
            assert await pool.run(SHARD_MAX) == [(-1,)]
    finally:
        await gate.close()
