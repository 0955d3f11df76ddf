"""The ops endpoint (outbox_core.ops_http) against hostile clients over real TCP: a
slowloris client, oversized and malformed requests, and more connections than it serves.
None of them gets a traceback logged, and a well-behaved probe is answered afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from outbox_core.ops_http import OpsServer, Probe
from tests.support.ops import http_get

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def serving(**limits: float) -> AsyncIterator[OpsServer]:
    server = OpsServer(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        lambda: Probe(True, "alive"),
        lambda: Probe(True, "ready"),
        **limits,  # type: ignore[arg-type]
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]


async def test_a_slowloris_client_is_cut_off_at_the_request_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One header line every 0.5 s keeps each line well inside any per-line timeout; the
    request as a whole gets request_deadline_s and is answered 408, before the client has
    sent all it meant to."""
    caplog.set_level(logging.DEBUG)
    async with serving(request_deadline_s=2.0) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        answered = asyncio.create_task(reader.read())
        sent = 0
        for i in range(40):  # 20 s of headers if nobody stops it
            await asyncio.sleep(0.5)
            if answered.done():
                break
            try:
                writer.write(f"X-Slow-{i}: 1\r\n".encode())
                await writer.drain()
            except ConnectionError:
                break
            sent += 1
        cut_off = sent < 40
        answer = await asyncio.wait_for(answered, timeout=30)
        writer.close()
        assert cut_off, f"all {sent} headers were read: no deadline"
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert (await http_get(server.port, "/healthz")).status == 200
    _no_tracebacks(caplog)


async def test_oversized_and_malformed_requests_get_a_status_never_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(max_headers=10) as server:
        port = server.port
        long_line = await _exchange(port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
        long_header = await _exchange(
            port, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n"
        )
        many = await _exchange(
            port,
            b"GET /healthz HTTP/1.1\r\n"
            + b"".join(f"X-{i}: 1\r\n".encode() for i in range(500))
            + b"\r\n",
        )
        garbage = await _exchange(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")
        assert long_line.startswith(b"HTTP/1.1 431 "), long_line[:80]
        assert long_header.startswith(b"HTTP/1.1 431 "), long_header[:80]
        assert many.startswith(b"HTTP/1.1 431 "), many[:80]
        assert garbage.startswith(b"HTTP/1.1 400 "), garbage[:80]
        assert (await http_get(port, "/healthz")).status == 200
    _no_tracebacks(caplog)


async def test_an_answer_reaches_a_client_that_goes_on_sending_after_it() -> None:
    """A client still sending when its request is refused (here a header line of 1 MB, far
    past the line limit): closing with its bytes unread would reset the connection, which
    discards the answer before the client reads it. The server half-closes and drops what
    still comes, for a bounded time, so the client gets its 431."""
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 1_000_000)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 "), answer


async def test_connections_past_the_cap_are_answered_busy_and_the_server_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(max_connections=4, request_deadline_s=2.0) as server:
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
        try:
            await asyncio.sleep(0.2)  # all four accepted and waiting for their request line
            busy = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n")
            assert busy.startswith(b"HTTP/1.1 503 "), busy[:80]
            # The idle ones run out of time, and the server takes requests again.
            for reader, _ in idle:
                assert (await asyncio.wait_for(reader.read(), timeout=30)).startswith(
                    b"HTTP/1.1 408 "
                )
            assert (await http_get(server.port, "/healthz")).status == 200
        finally:
            for _, writer in idle:
                writer.close()
    _no_tracebacks(caplog)
