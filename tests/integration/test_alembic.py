"""The outbox tables in a service's own Alembic history: the README's steps, run with Alembic
itself against real Postgres, give a schema the relay accepts and publishes from; a schema
that differs is refused with the difference named; each later migration's Alembic
operations (outbox_core.alembic_ops) are recognised instead of applied twice."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine

from outbox_core.alembic_ops import UPGRADES
from outbox_core.migrate import available, schema_sql
from outbox_core.tables import metadata
from producer_lib import MigrationError, Outbox, migrate
from tests.conftest import TopicFactory
from tests.integration.test_migrations import ALL, catalog
from tests.support.db import Backend, postgres_backend, sqlite_backend
from tests.support.kafka import read_topic
from tests.support.ops import login_roles, role_statement, with_user
from tests.support.postgres import Databases
from tests.support.processes import ChildProcess
from tests.support.readme import blocks
from tests.support.relay import relay_env, wait_drained

pytestmark = pytest.mark.integration

SECTION = "### 2. Create the tables"
ALEMBIC = "Or keep them in your own Alembic history"
BIN = Path(sys.executable).parent

MODELS = """
from sqlalchemy import BigInteger, Column, Table, Text
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


orders = Table(
    "orders", Base.metadata, Column("id", BigInteger, primary_key=True), Column("item", Text)
)
"""


def _shell(command: str, cwd: Path, url: str) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")},
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DATABASE_URL": url,
        "PYTHONPATH": "",  # the service's directory only (alembic.ini: prepend_sys_path)
    }
    result = subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _follow_the_readme(service: Path, url: str) -> str:
    """Runs the README's Alembic steps in `service`; returns the last command's output."""
    init, env_py, rest = blocks(SECTION, after=ALEMBIC)[:3]
    assert (init.language, env_py.language, rest.language) == ("bash", "python", "bash")
    (service / "myservice").mkdir()
    (service / "myservice" / "__init__.py").write_text("")
    (service / "myservice" / "models.py").write_text(MODELS)
    for command in init.commands():
        _shell(command, service, url)
    env_file = service / "alembic" / "env.py"
    source = env_file.read_text()
    assert source.count("target_metadata = None\n") == 1  # the line the README replaces
    env_file.write_text(source.replace("target_metadata = None\n", env_py.text))
    out = ""
    for command in rest.commands():
        out = _shell(command, service, url)
    return out


async def test_the_readme_alembic_steps_give_a_schema_the_relay_publishes_from(
    pg_url: str, tmp_path: Path, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    out = _follow_the_readme(tmp_path, pg_url)
    assert "found already in the schema and recorded: 0001, 0002" in out, out
    assert "shard_count 16" in out
    backend = postgres_backend(pg_url)
    assert backend.fetch("migrations_applied") == ALL
    revisions = list((tmp_path / "alembic" / "versions").glob("*.py"))
    assert len(revisions) == 1
    assert "outbox_events" in revisions[0].read_text()

    topic = await new_topic("alembic")
    with psycopg.connect(pg_url) as conn:
        event_id = Outbox().emit(conn, topic=topic, key="o-1", event_type="OrderPlaced", payload={})
    relay = ChildProcess(
        ["-m", "relay.cli", "run"],
        relay_env(backend, kafka_bootstrap),
        tmp_path / "relay.log",
        "relay",
    )
    try:
        await wait_drained(backend)
    finally:
        code = relay.terminate()
    assert code == 0, relay.log()
    records = await read_topic(kafka_bootstrap, topic)
    assert [r.header("event_id") for r in records] == [str(event_id).encode()], records
    # A second migrate (the next deploy) finds nothing to do.
    again = _shell(f"{BIN / 'outbox-relay'} migrate --database-url {pg_url}", tmp_path, pg_url)
    assert "migrations applied: none" in again
    assert "recorded" not in again


@pytest.fixture
def from_metadata(pg_url: str) -> Backend:
    """What autogenerate makes: the tables of outbox_core.tables, no migration recorded."""
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        metadata.create_all(conn)
    engine.dispose()
    return postgres_backend(pg_url)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("outbox_tenant_index_drop", "expected index outbox_events outbox_events_tenant_idx"),
        ("outbox_attempts_default_change", "found column outbox_events attempts integer True 1"),
    ],
)
def test_a_schema_changed_by_hand_is_refused_and_nothing_recorded(
    from_metadata: Backend, change: str, named: str
) -> None:
    from_metadata.execute(change)
    with pytest.raises(MigrationError, match="not the ones this version's migrations create") as e:
        migrate(from_metadata.url)
    assert named in str(e.value)
    assert from_metadata.fetch("migrations_applied") == []
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "migrate", "--database-url", from_metadata.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "MigrationError" in result.stderr


def test_adopting_inserts_the_missing_shard_count(from_metadata: Backend) -> None:
    from_metadata.execute("outbox_settings_clear")
    report = migrate(from_metadata.url, shard_count=8)
    assert (report.adopted, report.applied, report.shard_count) == ([1, 2, 3, 4, 5], [], 8)
    assert from_metadata.fetch("schema_settings") == [("shard_count", "8")]


def _alembic_ops(url: str, version: int) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        UPGRADES[version](Operations(MigrationContext.configure(conn)))
    engine.dispose()


def test_every_migration_after_the_first_ships_alembic_operations() -> None:
    assert set(UPGRADES) == {m.version for m in available("postgres")[1:]}


@pytest.mark.parametrize("recorded_first", [False, True], ids=["none-recorded", "0001-recorded"])
def test_alembic_operations_equal_the_sql_migration_and_are_recorded_not_applied(
    pg_url: str, databases: Databases, monkeypatch: pytest.MonkeyPatch, recorded_first: bool
) -> None:
    backend = postgres_backend(pg_url)
    first = available("postgres")[:1]
    if recorded_first:  # adopted or migrated at 0001 long ago, then 0002 by Alembic
        monkeypatch.setattr("outbox_core.migrate.available", lambda dialect: first)
        migrate(backend.url)
        monkeypatch.undo()
    else:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(first[0].sql.encode())
    for version in sorted(UPGRADES):
        _alembic_ops(pg_url, version)
    report = migrate(backend.url)
    assert report.applied == []
    later = sorted(UPGRADES)
    assert report.adopted == (later if recorded_first else [1, *later])
    assert backend.fetch("migrations_applied") == ALL
    migrated = postgres_backend(databases.empty())
    migrated.migrate()
    assert catalog(backend) == catalog(migrated)


def test_sqlite_tables_no_migration_recorded_are_refused_not_stamped(tmp_path: Path) -> None:
    path = tmp_path / "made-by-hand.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(schema_sql("sqlite"))
    with pytest.raises(MigrationError, match="adopted on Postgres only"):
        migrate(f"sqlite:///{path}")
    # Rolled back whole: not even the bookkeeping table was left behind.
    tables = [r[0] for r in sqlite_backend(path).fetch("schema_tables")]
    assert "outbox_events" in tables
    assert "outbox_schema_migrations" not in tables


def test_adopting_without_create_on_the_database_says_what_is_needed(
    pg_url: str, postgres_admin: str
) -> None:
    with login_roles(postgres_admin, pg_url, ["migrator"]) as made:
        role, password = made["migrator"]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(role_statement("role_schema_create_grant", role))
        as_migrator = with_user(pg_url, role, password)
        engine = create_engine(as_migrator.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.begin() as conn:
            metadata.create_all(conn)
        engine.dispose()
        with pytest.raises(MigrationError, match="needs CREATE on the database"):
            migrate(as_migrator)
