"""The relay's Postgres connections, on asyncpg.

psycopg's async connection waits for each statement's reply by registering its socket
with the event loop and removing it again, and builds the statement's parameters and
rows in Python; asyncpg keeps one protocol object per connection on the loop and binds
and parses in Cython. Measured on the relay at a steady load (docs/benchmarks.md, "Steady
load: what a cycle costs"), the same cycles took a fifth less CPU.

AsyncpgPool keeps the contract of consumer_lib's psycopg pool (outbox_core/pg_pool.py):
autocommit, a connection per statement or plan, the session settings at start-up or,
behind a transaction pooler, at the start of each statement's transaction, connections
that come back when the server does, and every driver error translated at this
boundary. What libpq would do from the URL's connection parameters (TCP keepalives,
tcp_user_timeout, the `options` startup parameter, PGAPPNAME and PGOPTIONS) is done here,
since asyncpg reads none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from outbox_core.database_url import Dialect
from outbox_core.driver_errors import classify
from outbox_core.errors import ConfigurationError, DatabaseError, SessionSettingsDropped
from outbox_core.executors import (
    AsyncExecutor,
    AsyncpgExecutor,
    Plan,
    Rows,
    Statement,
    run_plan_async,
    translated,
)
from outbox_core.pg_session import PerTransaction, SessionSettings

RETRY_CONNECT_S = 0.5  # between first-connection attempts while the server is away
PROBE_TIMEOUT_S = 10.0

# libpq connection parameters asyncpg does not read: left in the URL, asyncpg would send
# each to the server as a setting, which refuses them. The pool honours some itself
# (connect_args: options, and the keepalives on the socket).
_LIBPQ_ONLY = frozenset(
    {
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "connect_timeout",
        "options",
        "fallback_application_name",
        "client_encoding",
        "gssencmode",
        "channel_binding",
        "requiressl",
        "sslcompression",
        "hostaddr",
    }
)


def _options_settings(options: str | None) -> dict[str, str]:
    """Server settings from a libpq `options` value (`-c name=value`, `--name=value`)."""
    settings: dict[str, str] = {}
    try:
        words = shlex.split(options or "")
    except ValueError as exc:  # an unclosed quote
        raise ConfigurationError(
            f"the database URL's options (or PGOPTIONS) cannot be read: {exc}"
        ) from None
    for i, word in enumerate(words):
        if word == "-c" and i + 1 < len(words):
            pair = words[i + 1]
        elif (word.startswith("-c") and len(word) > 2) or word.startswith("--"):
            pair = word[2:]
        else:
            continue
        name, sep, value = pair.partition("=")
        if sep:
            settings[name.replace("-", "_")] = value
    return settings


def connect_args(
    conninfo: str, session: SessionSettings
) -> tuple[str, dict[str, str], dict[str, str]]:
    """What asyncpg connects with: the URL without the parameters only libpq reads, the
    server settings (ours, then the user's `options` or PGOPTIONS, which win, as
    libpq_options orders them; none behind a transaction pooler, which refuses them at
    start-up), and the socket options (libpq's names, the URL's own values first)."""
    parts = urlsplit(conninfo)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    kept = {k: v for k, v in query.items() if k not in _LIBPQ_ONLY}
    dsn = urlunsplit(parts._replace(query=urlencode(kept)))
    server: dict[str, str] = {}
    appname = os.environ.get("PGAPPNAME")
    if "application_name" not in query and appname:
        server["application_name"] = appname  # libpq's fallback; a pooler takes it too
    if session.pooler == "none":
        server.update(session.server)
        server.update(_options_settings(query.get("options", os.environ.get("PGOPTIONS"))))
    sockopts = {**session.libpq, **{k: v for k, v in query.items() if k in session.libpq}}
    return dsn, server, sockopts


def _set_socket_options(conn: Any, options: Mapping[str, str]) -> None:
    """TCP keepalives and tcp_user_timeout on the connection's socket, as libpq sets them
    from its parameters: a vanished server or pooler is found dead in seconds, not in the
    minutes of the OS's defaults."""
    sock = conn._transport.get_extra_info("socket")  # asyncpg exposes no other handle
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    if options.get("keepalives", "1") != "0":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, opt in (
            ("keepalives_idle", "TCP_KEEPIDLE"),
            ("keepalives_interval", "TCP_KEEPINTVL"),
            ("keepalives_count", "TCP_KEEPCNT"),
        ):
            if name in options and hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), int(options[name]))
    timeout_ms = int(options.get("tcp_user_timeout", "0") or 0)
    if timeout_ms and hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_ms)


class AsyncpgPool:
    """An AsyncPool on asyncpg connections, in autocommit (see the module's docstring).

    Its own checkout, not asyncpg's Pool: that one resets every connection it takes back
    (RESET ALL and more: a second round trip for each statement's one), runs each timed
    checkout as a task of its own, and wraps every call in a proxy. Here a checkout takes an idle connection or opens one, up to max_size, and
    waits up to checkout_timeout_s only when all are busy; it fails then as a retriable
    DatabaseError. A connection comes back as it is: these statements leave no session
    state (no LISTEN, cursor, advisory lock or SET), and one that ends inside a
    transaction (a statement cut short) is closed instead. A statement that finds its
    connection lost closes the idle ones too (a restarted server breaks them all at
    once), so the retry connects afresh instead of drawing another dead one.
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
        self.session = session or SessionSettings()
        self._dsn, self._server, self._sockopts = connect_args(conninfo, self.session)
        self._timeout = checkout_timeout_s
        self._open_wait_s = open_wait_s
        self._local = self.session.local_settings() if self.session.per_transaction else None
        self._slots = asyncio.Semaphore(max_size)
        self._idle: list[Any] = []
        self._closed = False

    async def _connect(self, timeout_s: float) -> Any:
        conn = await asyncpg.connect(
            self._dsn,
            timeout=timeout_s,
            server_settings=self._server,
            # A prepared statement lives on one server connection: behind a transaction
            # pooler the next transaction may be on another.
            statement_cache_size=0 if self.session.pooler == "transaction" else 100,
        )
        try:
            _set_socket_options(conn, self._sockopts)
        except OSError:
            conn.terminate()
            raise
        return conn

    async def _check_out(self) -> Any:
        """A connection for one call, given back with _give_back. Two plain calls, not an
        async context manager: the relay checks out for each of its hundreds of
        statements a second, and the generator behind one cost a tenth of a statement."""
        if self._slots.locked():
            try:
                async with asyncio.timeout(self._timeout):
                    await self._slots.acquire()
            except TimeoutError:
                raise DatabaseError(
                    f"no database connection free within {self._timeout:g} s (every one busy)",
                    retriable=True,
                ) from None
        else:
            await self._slots.acquire()
        try:
            return self._take_idle() or await self._connect(self._timeout)
        except BaseException:
            self._slots.release()
            raise

    def _give_back(self, conn: Any) -> None:
        # Even a statement cancelled midway leaves its connection usable: asyncpg's
        # next statement on it waits for the cancellation to end.
        self._check_in(conn)
        self._slots.release()

    def _take_idle(self) -> Any:
        """An idle connection still open (one whose socket was reset while it waited is
        dropped), or None."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
        return None

    def _check_in(self, conn: Any) -> None:
        if conn.is_closed():
            self._close_idle()  # lost: the idle ones most likely are too
        elif self._closed or conn.is_in_transaction():
            conn.terminate()
        else:
            self._idle.append(conn)

    def _close_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.terminate()

    async def open(self) -> None:
        """Ready at once; with open_wait_s, wait that long for a first connection. A
        connection refused for good (a wrong password, a pooler refusing a parameter)
        fails at once with its own error."""
        self._closed = False
        if self._open_wait_s is None:
            return
        await self._first_connection(self._open_wait_s)
        if self.session.dropped(await self.settings()):
            await self.close()
            raise SessionSettingsDropped(
                "the server runs none of the session settings given at start-up: a "
                "connection pooler dropped them",
                parameter="options",
            )

    async def _first_connection(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._idle.append(await self._connect(min(wait_s, PROBE_TIMEOUT_S)))
                return
            except Exception as exc:
                error = classify(exc)
                if not error.retriable or time.monotonic() >= deadline:
                    raise error from exc
            await asyncio.sleep(RETRY_CONNECT_S)

    async def settings(self) -> Rows:
        """The server settings in force on this pool's statements (name, value)."""
        return await self.run(self.session.show())

    async def close(self) -> None:
        """Closes the idle connections now, the busy ones as they come back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close(timeout=PROBE_TIMEOUT_S)

    async def run(self, statement: Statement) -> Rows:
        with translated():
            conn = await self._check_out()
            try:
                return await self._executor(conn).run(statement)
            finally:
                self._give_back(conn)

    async def run_plan(self, plan: Plan, *, write: bool = False) -> Any:
        """All of the plan's statements on one connection, each committing by itself."""
        with translated():
            conn = await self._check_out()
            try:
                return await run_plan_async(plan, self._executor(conn))
            finally:
                self._give_back(conn)

    def _executor(self, conn: Any) -> AsyncExecutor:
        executor = AsyncpgExecutor(conn)
        return executor if self._local is None else PerTransaction(executor, self._local)
