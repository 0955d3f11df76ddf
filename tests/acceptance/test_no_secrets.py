"""No secret reaches an operator: not in logs (text or JSON, at DEBUG), not in /metrics or
the probes, not in error messages or tracebacks.

The relay runs as `python -m relay.cli run` with its database password a canary: a
Postgres role of its own with that password and the relay's grants on a private
database. Kafka is unreachable at first (start-up retries log their exception text), then
reachable; a record too large for the producer is parked. Start-up also fails on purpose:
a shard count that does not match, a malformed URL, a mistyped flag, a port in use (an
uncaught exception's traceback). The admin CLI fails against a database that does not
answer and on a password libpq quotes back in its error. The canary's distinctive core
must appear nowhere, in whatever spelling (raw, URL-encoded, JSON- or repr-escaped: each
contains the core).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from scripts.ports import taken_port
from tests.conftest import TopicFactory
from tests.support.db import Backend, postgres_backend
from tests.support.ops import (
    ROOT,
    cli_async,
    grant,
    http_get,
    login_roles,
    ops_port_in,
    output,
    tcp_gate,
    with_user,
)
from tests.support.relay import relay_env, wait_drained
from tests.support.stores import emit, event
from tests.support.waits import until

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Canary:
    core: str  # what must never be seen
    password: str  # the core and characters that need escaping in URLs, JSON and repr
    owner: Backend  # the private database, as its owner
    relay_url: str  # the relay's role and the canary password

    def assert_absent(self, **texts: str) -> None:
        leaks = [name for name, text in texts.items() if self.core in text]
        assert leaks == [], f"the canary password leaked into {leaks}"


@pytest.fixture
def canary(pg_url: str, postgres_admin: str) -> Iterator[Canary]:
    core = f"cnry{uuid.uuid4().hex[:16]}"
    password = f"{core}-\"'%&\\x"
    owner = postgres_backend(pg_url)
    owner.migrate()
    with login_roles(postgres_admin, pg_url, ["relay"], {"relay": password}) as made:
        role, _ = made["relay"]
        grant(pg_url, "relay", {"relay_role": role})
        yield Canary(core, password, owner, with_user(pg_url, role, password))


class RelayRun:
    """`python -m relay.cli run` with stdout and stderr kept apart."""

    def __init__(self, env: dict[str, str], folder: Path, name: str) -> None:
        self._out = folder / f"{name}.stdout"
        self._err = folder / f"{name}.stderr"
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "run"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    @property
    def stdout(self) -> str:
        return self._out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self._err.read_text(errors="replace")

    async def logged(self, text: str, times: int = 1, timeout: float = 60) -> None:
        async def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"relay exited {self.proc.returncode}:\n{self.stderr}")
            return self.stderr.count(text) >= times

        await until(seen, timeout, f"{times}x {text!r} in the relay's log")

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _env(canary: Canary, bootstrap: str, **over: Any) -> dict[str, str]:
    values: dict[str, Any] = {"log_level": "DEBUG", "http_port": 0, **over}
    return relay_env(postgres_backend(canary.relay_url), bootstrap, **values)


@pytest.mark.parametrize("log_json", [False, True], ids=["text", "json"])
async def test_relay_run_at_debug_never_shows_the_password(
    log_json: bool,
    canary: Canary,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    topic = await new_topic("canary")
    emit(canary.owner, *(event(f"k-{i}", topic=topic) for i in range(5)))
    emit(canary.owner, event("k-big", topic=topic, payload={"blob": "x" * 2000}))
    scraped: dict[str, str] = {}
    async with tcp_gate(kafka_bootstrap) as gate:
        env = _env(canary, gate.address, log_json=log_json, kafka_max_request_size=1024)
        relay = RelayRun(env, tmp_path, "relay")
        try:
            # Kafka unreachable: start-up retries, with the exception's text, at DEBUG.
            await relay.logged("kafka start failed; retrying", times=3)
            port = ops_port_in(relay.stderr)
            assert port is not None, relay.stderr
            for path in ("/metrics", "/healthz", "/readyz"):
                response = await http_get(port, path)
                scraped[f"down {path}"] = f"{response.status} {response.body}"
            assert scraped["down /readyz"].startswith("503 "), scraped
            assert "kafka" in scraped["down /readyz"]
            # Kafka back: the relay starts, publishes and parks the oversize record.
            await gate.open()
            await relay.logged("relay started")
            await wait_drained(canary.owner, timeout=60, parked_ok=True)
            await relay.logged("rows parked")
            for path in ("/metrics", "/readyz"):
                response = await http_get(port, path)
                scraped[f"up {path}"] = f"{response.status} {response.body}"
            assert scraped["up /readyz"].startswith("200 "), scraped
            assert (
                f'outbox_relay_events_published_total{{topic="{topic}"}} 5.0'
                in (scraped["up /metrics"])
            )
            code = await asyncio.to_thread(relay.stop)
        finally:
            relay.kill()
    stdout, stderr = relay.stdout, relay.stderr
    assert code == 0, stderr
    canary.assert_absent(stdout=stdout, stderr=stderr, **scraped)
    # The logs are the real thing: DEBUG lines, exception text, the shutdown.
    assert "KafkaConnectionError" in stderr
    assert "relay stopped" in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    if log_json:
        docs = [json.loads(line) for line in lines]  # every line one JSON object
        assert {"ts", "level", "logger", "msg"} <= set(docs[0])
        assert "debug" in {d["level"] for d in docs}
    else:
        assert any(" DEBUG " in line for line in lines)


async def test_start_up_failures_and_cli_errors_never_show_the_password(
    canary: Canary, kafka_bootstrap: str, tmp_path: Path
) -> None:
    texts: dict[str, str] = {}

    async def run_fails(name: str, env: dict[str, str], code: int, says: str) -> None:
        relay = RelayRun(env, tmp_path, name)
        try:
            got = await asyncio.to_thread(relay.proc.wait, 120)
        finally:
            relay.kill()
        texts[f"{name} stdout"], texts[f"{name} stderr"] = relay.stdout, relay.stderr
        assert got == code, f"{name}: exit {got}\n{relay.stderr}"
        assert says in relay.stderr, f"{name}:\n{relay.stderr}"

    bad = _env(canary, kafka_bootstrap)
    bad["OUTBOX_DATABASE_URL"] = canary.relay_url.replace("postgresql://", "postgresql//", 1)
    with taken_port() as taken:
        await asyncio.gather(
            # A shard count the database does not record: refused after connecting.
            run_fails("shards", _env(canary, kafka_bootstrap, shard_count=8), 2, "mismatch"),
            # A malformed URL (no "://"): refused before connecting.
            run_fails("bad-url", bad, 2, "database URL must start with"),
            # The ops port taken: an uncaught exception, its traceback through the
            # redacting hook.
            run_fails(
                "port-taken",
                _env(canary, kafka_bootstrap, http_port=taken),
                1,
                "Traceback",
            ),
        )

    # The CLI: a mistyped flag (argparse echoes it), a database that does not answer, and a
    # password libpq cannot decode (its error quotes the password back).
    parts = urlsplit(canary.relay_url)
    login = parts.netloc.rsplit("@", 1)[0]  # role:url-encoded-password
    unreachable = urlunsplit(parts._replace(netloc=f"{login}@127.0.0.1:1"))
    undecodable = urlunsplit(
        parts._replace(netloc=f"{parts.username}:{canary.core}%zz@{parts.netloc.rsplit('@')[1]}")
    )
    cases: dict[str, tuple[tuple[str, ...], dict[str, str], int, str]] = {
        "typo": (("run", "--databse-url", canary.relay_url), {}, 2, "unrecognized arguments"),
        "migrate": (("migrate",), {"OUTBOX_DATABASE_URL": unreachable}, 1, "port 1 failed"),
        "status": (("status", "--database-url", unreachable), {}, 1, "port 1 failed"),
        "parked": (("parked", "list"), {"OUTBOX_DATABASE_URL": unreachable}, 1, "failed"),
        "undecodable": (
            ("status",),
            {"OUTBOX_DATABASE_URL": undecodable},
            1,
            "invalid percent-encoded token",
        ),
    }
    results = await asyncio.gather(*(cli_async(*a, env=e) for a, e, _, _ in cases.values()))
    for (name, (_, _, code, says)), done in zip(cases.items(), results, strict=True):
        texts[f"cli {name}"] = done.stdout + done.stderr
        assert done.returncode == code, f"{name}: {output(done)}"
        assert says in done.stderr, f"{name}: {output(done)}"
    canary.assert_absent(**texts)


async def test_consumer_cli_redacts_its_apps_database_password(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """`outbox-consumer run` with an app whose database password libpq quotes back in its
    error (an invalid %-escape): the pool's connection errors and the transient failures
    are logged, at DEBUG, with the password replaced."""
    from tests.support.consumers import ConsumerProcess, consumer_env, produce, relay_record

    core = f"cnry{uuid.uuid4().hex[:16]}"
    url = f"postgresql://consumer:{core}%zz@127.0.0.1:1/none"
    topic = await new_topic("consumer-canary")
    await produce(kafka_bootstrap, topic, [relay_record(str(uuid.uuid4()), "k", {"n": 1})])
    env = consumer_env(
        postgres_backend(url),
        kafka_bootstrap,
        topics=[topic],
        group=f"g-{uuid.uuid4().hex[:8]}",
        name="canary",
    )
    proc = ConsumerProcess(env, tmp_path / "consumer.log", name="canary")
    try:
        await proc.wait_log("invalid percent-encoded token", timeout=90)
        proc.terminate()
    finally:
        if proc.running:
            proc.kill()
    log = proc.log()
    assert core not in log, "the consumer's database password leaked into its log"
    assert "***" in log
