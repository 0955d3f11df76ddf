"""A tiny HTTP endpoint for operators: /metrics (Prometheus), /healthz and /readyz.

Served by the relay and by consumers. asyncio.start_server keeps it in the process's
event loop with no extra dependency; it answers GET only and closes every connection
after one response.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("outbox_core.ops_http")


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
    ) -> None:
        self._host, self._port = host, port
        self._registry = registry
        self._routes = {"/healthz": healthz, "/readyz": readyz}
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0 in tests)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("ops endpoint listening", extra={"host": self._host, "port": self.port})

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?")[0]) if len(parts) >= 2 else ("", "")
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self._registry)
            elif path in self._routes:
                probe = self._routes[path]()
                status = "200 OK" if probe.ok else "503 Service Unavailable"
                ctype, body = "text/plain; charset=utf-8", (probe.detail + "\n").encode()
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
