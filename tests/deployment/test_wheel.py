"""The wheel, installed the README's way into clean virtualenvs, run from a directory outside
the repository: the base install emits on SQLite without aiokafka, the relay extra
publishes that event to Kafka, the consumer extra applies it; a missing extra is one line.

The install commands are the README's ("### 1. Install") with the wheel's path for the
distribution's name, plus constraints.txt (the pinned versions every install here uses,
served from the pip cache).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.service_common import machine_lock
from tests.conftest import TopicFactory
from tests.support.kafka import Record, read_topic
from tests.support.readme import blocks

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIST = "outbox-relay"
RELAY_NEEDS = (
    "outbox-relay: the relay needs the 'relay' extra: pip install 'outbox-relay[relay]' "
    "(missing: aiokafka, psycopg_pool, tenacity, pydantic, pydantic_settings, prometheus_client)"
)
# Modules the relay and consumer extras bring, which a producer's install must not have.
NOT_IN_BASE = ("aiokafka", "psycopg_pool", "prometheus_client", "pydantic_settings", "tenacity")

EMIT = """
import importlib.util, sqlite3, sys
assert not any(p.startswith({root!r}) for p in sys.path), sys.path
missing = [m for m in {not_in_base!r} if importlib.util.find_spec(m) is not None]
assert not missing, missing
from producer_lib import Outbox, migrate
migrate("sqlite:///" + sys.argv[1])
conn = sqlite3.connect(sys.argv[1])
print(Outbox().emit(conn, topic=sys.argv[2], key="o-1", event_type="OrderPlaced",
                    payload={{"order_id": 1}}))
conn.commit()
"""

CONSUMERS = """
import os
from pathlib import Path

from consumer_lib import ConsumerApp, ConsumerSettings, SqlAlchemySync
from sqlalchemy import create_engine

app = ConsumerApp(
    ConsumerSettings.from_env(group_id="wheel"),
    SqlAlchemySync(create_engine("sqlite:///" + os.environ["CONSUMER_DB"])),
)


@app.handler(os.environ["TOPIC"], "OrderPlaced")
def on_order(event, session):
    with Path("applied.txt").open("a") as out:
        out.write(f"{event.event_id}\\n")
"""


class Env:
    """A clean virtualenv; commands run in `cwd`, which is not the repository."""

    def __init__(self, path: Path, cwd: Path) -> None:
        self.path, self.cwd = path, cwd
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def environ(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "PYTHON"))}
        path = f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**keep, "PATH": path, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}

    def run(self, args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args,
            cwd=self.cwd,
            env=self.environ(**extra),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def ok(self, args: list[str], **extra: str) -> str:
        result = self.run(args, **extra)
        assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self, args: list[str], log: Path, **extra: str) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                args,
                cwd=self.cwd,
                env=self.environ(**extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    with machine_lock("wheel"):  # another worker's build would share ROOT/build
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
            check=True,
            timeout=300,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
    [built] = out.glob("outbox_relay-*.whl")
    return built


def install_commands() -> dict[str, list[str]]:
    """README's install lines by extra ('' for the base), as argument lists."""
    [block] = blocks("### 1. Install")
    found: dict[str, list[str]] = {}
    for line in block.commands():
        args = shlex.split(line)
        assert args[:2] == ["pip", "install"], line
        target = args[-1]
        assert target.startswith(DIST), line
        found[target[len(DIST) :].strip("[]")] = args
    return found


def install(env: Env, extra: str, wheel: Path) -> None:
    args = install_commands()[extra]
    target = str(wheel) + args[-1][len(DIST) :]
    env.ok([env.bin("pip"), *args[1:-1], "-q", "-c", str(ROOT / "constraints.txt"), target])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "service"
    work.mkdir()
    return work


async def _records(bootstrap: str, topic: str, timeout: float = 60) -> list[Record]:
    deadline = time.monotonic() + timeout
    while True:
        records = await read_topic(bootstrap, topic)
        if records or time.monotonic() > deadline:
            return records
        await asyncio.sleep(0.5)


async def _until(done: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        await asyncio.sleep(0.5)


def test_the_wheel_holds_the_license_the_sql_and_a_producer_sized_base(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
    info = meta.rsplit("/", 1)[0]
    assert f"{info}/licenses/LICENSE" in names
    for needed in (
        "outbox_core/sql/postgres/outbox_events.sql",
        "outbox_core/migrations/postgres/0001_initial.sql",
        "outbox_core/migrations/sqlite/schema.sql",
        "producer_lib/py.typed",
    ):
        assert needed in names
    requires = [
        line.split(": ", 1)[1]
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    base = sorted(r for r in requires if "extra ==" not in r)
    assert base == ["psycopg[binary]<4,>=3.1", "sqlalchemy[asyncio]<3,>=2.0"]
    assert "License-Expression: Apache-2.0" in metadata


def test_the_readme_installs_the_base_and_both_extras() -> None:
    assert sorted(install_commands()) == ["", "consumer", "relay"]


async def test_base_relay_and_consumer_installs_from_the_wheel(
    wheel: Path, workdir: Path, tmp_path: Path, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("wheel")
    outbox_db = workdir / "outbox.db"

    base = Env(tmp_path / "base", workdir)
    install(base, "", wheel)
    emit = EMIT.format(root=str(ROOT), not_in_base=NOT_IN_BASE)
    event_id = base.ok([base.bin("python"), "-c", emit, str(outbox_db), topic]).strip()
    refused = base.run([base.bin("outbox-relay"), "--version"])
    assert (refused.returncode, refused.stderr) == (2, RELAY_NEEDS + "\n")
    refused = base.run([base.bin("outbox-consumer"), "--version"])
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "outbox-relay: the consumer needs the 'consumer' extra: "
        "pip install 'outbox-relay[consumer]' (missing: aiokafka"
    )
    assert refused.stderr.count("\n") == 1
    imported = base.run([base.bin("python"), "-c", "import consumer_lib"])
    assert imported.returncode == 1
    assert "MissingExtra: outbox-relay: the consumer needs the 'consumer' extra" in imported.stderr

    relay = Env(tmp_path / "relay", workdir)
    install(relay, "relay", wheel)
    version = relay.ok([relay.bin("outbox-relay"), "--version"])
    assert version.strip() == f"outbox-relay {wheel.name.split('-')[1]}"
    log = tmp_path / "relay.log"
    proc = relay.start(
        [relay.bin("outbox-relay"), "run"],
        log,
        OUTBOX_DATABASE_URL=f"sqlite:///{outbox_db}",
        OUTBOX_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        OUTBOX_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        OUTBOX_HTTP_PORT="0",
    )
    try:
        records = await _records(kafka_bootstrap, topic)
    finally:
        proc.terminate()
        code = proc.wait(60)
    assert code == 0, log.read_text()
    assert [r.header("event_id") for r in records] == [event_id.encode()], log.read_text()

    consumer = Env(tmp_path / "consumer", workdir)
    install(consumer, "consumer", wheel)
    consumer_db = workdir / "consumer.db"
    migrate = "import sys; from producer_lib import migrate; migrate('sqlite:///' + sys.argv[1])"
    consumer.ok([consumer.bin("python"), "-c", migrate, str(consumer_db)])
    (workdir / "consumers.py").write_text(CONSUMERS)
    assert consumer.ok([consumer.bin("outbox-consumer"), "--version"]).startswith(
        "outbox-consumer "
    )
    log = tmp_path / "consumer.log"
    proc = consumer.start(
        [consumer.bin("outbox-consumer"), "run", "consumers:app"],  # from the working directory
        log,
        CONSUMER_DB=str(consumer_db),
        TOPIC=topic,
        OUTBOX_CONSUMER_BOOTSTRAP_SERVERS=kafka_bootstrap,
        OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
    )
    applied = workdir / "applied.txt"
    try:
        await _until(lambda: applied.exists() or proc.poll() is not None)
    finally:
        proc.terminate()
        code = proc.wait(60)
    assert code == 0, log.read_text()
    assert applied.read_text().split() == [event_id], log.read_text()
