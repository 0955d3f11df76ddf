"""The Postgres pools of the relay and of consumer_lib, against a server that goes away."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import pytest

from outbox_core.pg_pool import reconnecting_pool
from tests.support.ops import tcp_gate

pytestmark = pytest.mark.integration

OUTAGE_S = 35.0  # long enough for psycopg_pool's doubling delay to reach 16 and then 32 s


async def test_a_pool_reconnects_within_seconds_of_a_long_outage_ending(pg_url: str) -> None:
    """A pool whose every slot is held by a failed connection's retry (here its only slot;
    after a server restart, each of the pool's connections) keeps trying every few seconds.
    With psycopg_pool's uncapped doubling alone the next attempt after a 35 s outage came at
    ~67 s, half a minute after the server was back, and this test failed. The bound below is
    a liveness bound, with a wide margin over the ~4 s the window gives, not a speed
    measurement."""
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
                    assert time.monotonic() - back < 15, "no connection 15 s after the outage"
            assert pool.get_stats().get("connections_num", 0) >= 1
        finally:
            await pool.close()
