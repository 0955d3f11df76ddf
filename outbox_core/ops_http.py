"""A tiny HTTP endpoint for operators: /metrics (Prometheus), /healthz and /readyz.

Served by the relay and by consumers. asyncio.start_server keeps it in the process's
event loop with no extra dependency; it answers GET only and closes every connection
after one response.

It must never be a way to hurt the process it watches: a request has request_deadline_s
in all to arrive (a client sending a header every few seconds is cut off all the same),
at most max_headers header lines of at most 8 KiB each, and at most max_connections are
served at once (more are answered 503 at once and closed). A request that breaks these
rules, or any other, gets a status line and a one-line log at debug level: never a
traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("outbox_core.ops_http")

MAX_LINE_BYTES = 8192
REQUEST_DEADLINE_S = 5.0
MAX_HEADERS = 64
MAX_CONNECTIONS = 32
# After the answer, how long what the client still sends is read and dropped before the
# close: a close with unread bytes sends a reset, which can discard the answer (a 408 to
# a client still sending its headers) before the client reads it.
LINGER_S = 1.0


class _Refused(Exception):
    """A request the server will not read further: answer with this status and close."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str


class OpsServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        healthz: Callable[[], Probe],
        readyz: Callable[[], Probe],
        *,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        max_headers: int = MAX_HEADERS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._host, self._port = host, port
        self._registry = registry
        self._routes = {"/healthz": healthz, "/readyz": readyz}
        self._server: asyncio.Server | None = None
        self._deadline_s = request_deadline_s
        self._max_headers = max_headers
        self._max_connections = max_connections
        self._open = 0

    @property
    def listening(self) -> bool:
        """True once start() has bound the port."""
        return self._server is not None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0 in tests)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self._host, self._port, limit=MAX_LINE_BYTES
        )
        log.info("ops endpoint listening", extra={"host": self._host, "port": self.port})

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > self._max_connections:
                self._respond(writer, "503 Service Unavailable", "text/plain", b"busy\n")
            else:
                status, ctype, body = await self._answer(reader)
                self._respond(writer, status, ctype, body)
            await asyncio.wait_for(writer.drain(), timeout=self._deadline_s)
        except Exception as exc:  # a client that went away, or one too slow to read
            log.debug("ops request dropped", extra={"error": f"{type(exc).__name__}: {exc}"})
        finally:
            self._open -= 1  # answered: a lingering close does not hold a place
            with contextlib.suppress(Exception):
                await self._linger(reader, writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then drop what the client still sends, for at most LINGER_S."""
        if writer.is_closing() or not writer.can_write_eof():
            return
        writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            while await reader.read(MAX_LINE_BYTES):
                pass

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
        try:
            async with asyncio.timeout(self._deadline_s):
                request = await self._line(reader)
                for _ in range(self._max_headers + 1):
                    if (await self._line(reader)) in (b"\r\n", b"\n", b""):
                        break  # headers are not needed, only counted
                else:
                    raise _Refused("431 Request Header Fields Too Large", "too many headers")
        except TimeoutError:
            return "408 Request Timeout", "text/plain", b"request took too long\n"
        except _Refused as refused:
            log.debug("ops request refused", extra={"status": refused.status})
            return refused.status, "text/plain", (str(refused) + "\n").encode()
        parts = request.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", "text/plain", b"bad request line\n"
        method, path = parts[0], parts[1].split("?")[0]
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self._registry)
        if path in self._routes:
            probe = self._routes[path]()
            status = "200 OK" if probe.ok else "503 Service Unavailable"
            return status, "text/plain; charset=utf-8", (probe.detail + "\n").encode()
        return "404 Not Found", "text/plain", b"not found\n"

    @staticmethod
    async def _line(reader: asyncio.StreamReader) -> bytes:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise _Refused(
                "431 Request Header Fields Too Large", f"a line longer than {MAX_LINE_BYTES} bytes"
            ) from None
        except asyncio.IncompleteReadError as exc:
            return exc.partial  # the client stopped sending: what it sent is the last line

    @staticmethod
    def _respond(writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
