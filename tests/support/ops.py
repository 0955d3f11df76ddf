"""Operating the outbox in tests: the ops endpoint over HTTP, Prometheus text, the admin CLI
as a process, database roles, and a gate that makes Kafka unreachable, then reachable.

Test-only SQL lives in sql/ops_<dialect>.sql (rows parked or made older for the admin CLI)
and sql/privileges.sql (roles and privilege probes, Postgres).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from outbox_core.queries import Dialect, parse_blocks
from scripts.ports import reserved_port
from tests.support.db import Backend
from tests.support.waits import until

ROOT = Path(__file__).resolve().parents[2]
_SQL = Path(__file__).parent / "sql"
OPS_SQL: dict[Dialect, dict[str, str]] = {
    d: parse_blocks((_SQL / f"ops_{d}.sql").read_text(), f"ops_{d}.sql")
    for d in ("postgres", "sqlite", "mariadb")
}
PRIVILEGES_SQL = parse_blocks((_SQL / "privileges.sql").read_text(), "privileges.sql")


# --------------------------------------------------------------------------- rows


def _ids(backend: Backend, ids: Sequence[int]) -> Any:
    return list(ids) if backend.dialect == "postgres" else json.dumps(list(ids))


def _execute(backend: Backend, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    conn = backend.connect()
    try:
        cur = conn.cursor()  # a PyMySQL connection has no execute of its own
        cur.execute(OPS_SQL[backend.dialect][name], params)
        rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
        cur.close()
        conn.commit()
        return rows
    finally:
        conn.close()


def park(backend: Backend, ids: Sequence[int], error: str) -> None:
    """Leaves rows parked with last_error, as a relay does after failing sends."""
    _execute(backend, "ops_park", {"ids": _ids(backend, ids), "error": error})


def publish(backend: Backend, ids: Sequence[int]) -> None:
    """Marks rows published and kept, as a relay with retention=keep leaves them."""
    _execute(backend, "ops_publish", {"ids": _ids(backend, ids)})


def backdate(backend: Backend, ids: Sequence[int], seconds: float) -> None:
    """Makes rows look `seconds` older (their created_at moves back)."""
    _execute(backend, "ops_backdate", {"ids": _ids(backend, ids), "seconds": seconds})


@dataclass(frozen=True)
class Row:
    id: int
    event_id: str
    topic: str
    key: str
    status: str
    attempts: int
    published: bool


def rows(backend: Backend) -> dict[int, Row]:
    return {
        int(i): Row(int(i), str(e), str(t), str(k), str(s), int(a), bool(p))
        for i, e, t, k, s, a, p in _execute(backend, "ops_rows", {})
    }


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: str


async def http_get(port: int, path: str, *, host: str = "127.0.0.1") -> Response:
    """One GET against the ops endpoint (it closes the connection after each response)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = raw.decode().partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return Response(int(lines[0].split()[1]), headers.get("Content-Type", ""), body)


class Metrics:
    """A /metrics scrape, parsed: value(name, **labels) of one sample."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = float(s.value)

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Every sample of `name`, keyed by one label's value."""
        return {
            dict(labels)[label]: v
            for (n, labels), v in self.samples.items()
            if n == name and label in dict(labels)
        }


async def ops_port(owner: Any, timeout: float = 30.0, **kw: Any) -> int:
    """The port of a relay's or consumer's ops endpoint (`owner.ops`), once it listens: the
    endpoint exists a moment before start() has bound it. kw: until()'s (alive=...)."""

    def bound() -> int | None:
        ops = owner.ops
        return ops.port if ops is not None and ops.listening else None

    port: int = await until(bound, timeout, "the ops endpoint", **kw)
    return port


async def scrape(port: int) -> Metrics:
    response = await http_get(port, "/metrics")
    assert response.status == 200, response
    assert response.content_type.startswith("text/plain"), response.content_type
    return Metrics(response.body)


# --------------------------------------------------------------------------- the CLI


def cli(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`python -m relay.cli ARGS` (the outbox-relay entry point) as a process."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    base.pop("DATABASE_URL", None)  # only what the test passes
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def cli_async(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args, env=env, stdin=stdin)


PROMPT = b"[y/N] "


def cli_on_terminal(
    *args: str,
    env: dict[str, str] | None = None,
    answer: str,
    before_answer: Callable[[], None] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """The CLI with a terminal (a pty) as its stdin, as an operator runs it: once it asks
    for confirmation, before_answer() runs (say, to change rows meanwhile), then `answer`
    is typed. A run that never asks returns as it exits."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    base.pop("DATABASE_URL", None)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    assert proc.stdout is not None
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while PROMPT not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no prompt within {timeout:.0f}s; output so far: {out!r}")
            ready, _, _ = select.select([proc.stdout], [], [], left)
            chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
            if ready and not chunk:
                break  # exited without asking
            out += chunk
        if PROMPT in out:
            if before_answer is not None:
                before_answer()
            os.write(leader, answer.encode())
        rest, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, (out + rest).decode(), err.decode()
    )


def output(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


# --------------------------------------------------------------------------- roles


def with_user(url: str, user: str, password: str) -> str:
    """The libpq URL with another login (password URL-encoded)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def role_statement(name: str, role: str, password: str | None = None) -> sql.Composed:
    return sql.SQL(PRIVILEGES_SQL[name]).format(
        role=sql.Identifier(role),
        password=sql.Literal(password),
    )


@contextlib.contextmanager
def login_roles(
    admin_url: str,
    database_url: str,
    names: Sequence[str],
    passwords: Mapping[str, str] | None = None,
) -> Iterator[dict[str, tuple[str, str]]]:
    """Creates one login role per name (unique, cluster-wide; a random password unless
    given); yields name -> (role, password). On exit their privileges in the database,
    then the roles, are dropped."""
    given = passwords or {}
    made: dict[str, tuple[str, str]] = {
        n: (f"t_{n}_{uuid.uuid4().hex[:10]}", given.get(n, f"pw-{uuid.uuid4().hex}")) for n in names
    }
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for role, password in made.values():
            conn.execute(role_statement("role_create", role, password))
    try:
        yield made
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for role, _ in made.values():
                with contextlib.suppress(psycopg.Error):
                    conn.execute(role_statement("role_drop_owned", role))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for role, _ in made.values():
                with contextlib.suppress(psycopg.Error):
                    conn.execute(role_statement("role_drop", role))


GRANTS_FILE = ROOT / "migrations" / "postgres" / "grants.sql"
_PSQL_VARIABLE = re.compile(r':"([a-z_]+)"')


def grants(part: str, roles: Mapping[str, str]) -> sql.Composed:
    """The `grants_<part>` block of migrations/postgres/grants.sql, with psql's :"name"
    variables filled in as quoted identifiers (as `psql -v name=... -f` does)."""
    text = parse_blocks(GRANTS_FILE.read_text(), "grants.sql")[f"grants_{part}"]
    pieces = _PSQL_VARIABLE.split(text)  # text, variable, text, variable, ..., text
    return sql.Composed(
        [sql.SQL(p) if i % 2 == 0 else sql.Identifier(roles[p]) for i, p in enumerate(pieces)]
    )


def grant(database_url: str, part: str, roles: Mapping[str, str]) -> None:
    """Runs one part's grants on the database, as its owner (the admin URL's role)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(grants(part, roles))


def probe(url: str, name: str) -> str | None:
    """Runs a privilege probe of privileges.sql as the URL's role (rolled back): None when
    allowed, else the SQLSTATE of the refusal."""
    with psycopg.connect(url) as conn:
        try:
            conn.execute(PRIVILEGES_SQL[name])
        except psycopg.Error as exc:
            return exc.sqlstate or type(exc).__name__
        finally:
            conn.rollback()
    return None


# --------------------------------------------------------------------------- TCP gate


class TcpGate:
    """An address that refuses connections until open(), then forwards them to a real
    server ("host:port"; of a Kafka bootstrap list, the first). Kafka's metadata names the
    broker's own listener, so once a client has bootstrapped through the gate it talks to
    the broker directly; a Postgres client stays on the gate, so cut() loses its server
    (connections reset, new ones refused) until open() again, without touching the server.
    hold() makes it a black hole instead (connections accepted, nothing forwarded either
    way) until release(); what was held back is forwarded then."""

    def __init__(self, target: str) -> None:
        host, _, port = target.split(",")[0].rpartition(":")
        self._target = (host, int(port))
        self.port = reserved_port()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.loop: asyncio.AbstractEventLoop | None = None  # open()'s: cut() runs on it
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port)

    @property
    def is_open(self) -> bool:
        return self._server is not None

    async def close(self) -> None:
        server = self._server
        self.cut()
        if server is not None:
            await server.wait_closed()

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Refuse new connections and reset the ones forwarded (from the loop's thread)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()
        for task in self._pipes:
            task.cancel()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for task in (
            asyncio.create_task(pipe(reader, up_writer)),
            asyncio.create_task(pipe(up_reader, writer)),
        ):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


@contextlib.asynccontextmanager
async def tcp_gate(target: str) -> AsyncIterator[TcpGate]:
    gate = TcpGate(target)
    try:
        yield gate
    finally:
        await gate.close()


_OPS_PORT = re.compile(r"ops endpoint listening.*?\bport\b\W+(\d+)")


def ops_port_in(log: str) -> int | None:
    """The ops endpoint's port, from the relay's log line (text or JSON)."""
    match = _OPS_PORT.search(log)
    return int(match.group(1)) if match else None
