"""The Postgres pools of the relay and of consumer_lib, against a server that goes away."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote, urlsplit

import pytest
from psycopg_pool.base import AttemptWithBackoff

from outbox_core import pg_pool
from outbox_core.database_url import DatabaseUrl
from outbox_core.pg_pool import PostgresPool, reconnecting_pool
from outbox_core.pg_session import SessionSettings
from relay.database import PLANNER_SETTINGS, WORK_SETTINGS
from tests.support.db import DIALECT_SQL
from tests.support.ops import tcp_gate

pytestmark = pytest.mark.integration

# The outage's clock runs five times fast: psycopg_pool's first retry delay (1 s, doubling)
# and the pool's reconnection window are scaled by TIME_SCALE, so a 7 s outage here is the
# 35 s outage at full scale, long enough for the doubling delay to pass 16 s.
TIME_SCALE = 0.2
OUTAGE_S = 35.0 * TIME_SCALE


async def test_a_pool_reconnects_within_seconds_of_a_long_outage_ending(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool whose every slot is held by a failed connection's retry (here its only slot;
    after a server restart, each of the pool's connections) keeps trying every few seconds.
    With psycopg_pool's uncapped doubling alone the next attempt after a 35 s outage came at
    ~67 s, half a minute after the server was back, and this test failed. The bound below is
    a liveness bound (15 s at full scale), with a wide margin over the ~4 s the window
    gives, not a speed measurement."""
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 1.0 * TIME_SCALE)
    monkeypatch.setattr(pg_pool, "RECONNECT_WINDOW_S", pg_pool.RECONNECT_WINDOW_S * TIME_SCALE)
    server = urlsplit(pg_url).netloc.rpartition("@")[2]
    async with tcp_gate(server) as gate:  # refuses connections until it is opened
        pool = reconnecting_pool(pg_url.replace(server, gate.address, 1), max_size=1, timeout=1.0)
        await pool.open()
        try:
            await asyncio.sleep(OUTAGE_S)
            await gate.open()
            back = time.monotonic()
            while True:
                try:
                    async with pool.connection(timeout=1.0):
                        break
                except Exception:
                    late = time.monotonic() - back
                    assert late < 15 * TIME_SCALE, f"no connection {late:.1f} s after the outage"
            assert pool.get_stats().get("connections_num", 0) >= 1
        finally:
            await pool.close()


USER_OPTIONS = "-c search_path=billing,public -c random_page_cost=3"
SETTING = DIALECT_SQL["postgres"]["server_setting"]


def _with_options(url: str, options: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options={quote(options)}"


async def test_the_relay_s_pool_keeps_the_options_of_the_user_s_url(pg_url: str) -> None:
    """The relay's pools pass their own server options; a user's `options` in
    DATABASE_URL (a search_path naming the outbox's schema) must survive beside them, and
    a setting the user gave keeps the user's value."""
    pool = PostgresPool(
        _with_options(pg_url, USER_OPTIONS),
        max_size=1,
        session=SessionSettings(server=WORK_SETTINGS),
    )
    await pool.open()
    try:
        async with pool.pool.connection() as conn:
            got = []
            for name in (
                "search_path",
                "random_page_cost",
                "synchronous_commit",
                "jit",
                "plan_cache_mode",
            ):
                cur = await conn.execute(SETTING, {"name": name})
                got.append((await cur.fetchone())[0])
    finally:
        await pool.close()
    assert got == ["billing,public", "3", "off", "off", "force_custom_plan"]


def test_a_session_keeps_pgoptions_beside_the_relay_s_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no `options` in the URL, libpq would read PGOPTIONS, which an `options`
    keyword replaces: the user's environment must survive too (`outbox-relay status`)."""
    monkeypatch.setenv("PGOPTIONS", "-c search_path=billing,public")
    with DatabaseUrl.parse(pg_url).connect(
        autocommit=True, session=SessionSettings(server=PLANNER_SETTINGS)
    ) as c:
        got = [
            c.execute(SETTING, {"name": name}).fetchone()[0]
            for name in ("search_path", "random_page_cost")
        ]
    assert got == ["billing,public", "1.1"]
