"""The migrator: produces schema.sql, applies once, tolerates company, refuses strangers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox_core.migrate import available, schema_sql
from producer_lib import ConfigurationError, MigrationError, Outbox, UnknownMigration, migrate
from tests.support.db import Backend, postgres_backend, sqlite_backend
from tests.support.postgres import Databases
from tests.support.transactions import sync_tx

# MariaDB's migrations have tests of their own (test_mariadb.py): its catalog, its
# errors and its migrator's lock differ from these two.
pytestmark = [pytest.mark.integration, pytest.mark.dialects("postgres", "sqlite")]

ALL = [
    (1, "initial"),
    (2, "tenant"),
    (3, "consumer_dead_letters"),
    (4, "headers_check"),
    (5, "published_history"),
]


def catalog(backend: Backend) -> dict[str, Any]:
    if backend.dialect == "postgres":
        names = ["schema_columns", "schema_indexes", "schema_constraints", "schema_settings"]
        return {n: backend.fetch(n) for n in names}
    tables = [r[0] for r in backend.fetch("schema_tables")]
    return {
        "tables": tables,
        "columns": {t: backend.fetch("schema_table_columns", {"table": t}) for t in tables},
        "indexes": [(t, n, " ".join(s.split())) for t, n, s in backend.fetch("schema_indexes")],
        "triggers": [(t, n, " ".join(s.split())) for t, n, s in backend.fetch("schema_triggers")],
        "settings": backend.fetch("schema_settings"),
    }


@pytest.fixture
def twin(empty_backend: Backend, databases: Databases, tmp_path: Path) -> Iterator[Backend]:
    """A second empty database of the same kind, loaded from schema.sql."""
    if empty_backend.dialect == "sqlite":
        path = tmp_path / "from_schema.sqlite3"
        with sqlite3.connect(path) as conn:
            conn.executescript(schema_sql("sqlite"))
        yield sqlite_backend(path)
        return
    url = databases.empty()
    with psycopg.connect(url) as conn:
        conn.execute(schema_sql("postgres").encode())
    yield postgres_backend(url)


def test_migrations_produce_schema_sql(empty_backend: Backend, twin: Backend) -> None:
    empty_backend.migrate()
    migrated, declared = catalog(empty_backend), catalog(twin)
    assert migrated == declared
    assert any(migrated.values())  # the comparison saw tables, not two empty catalogs


def test_second_run_applies_nothing(empty_backend: Backend) -> None:
    first = migrate(empty_backend.url)
    second = migrate(empty_backend.url)
    assert first.applied == [m.version for m in available(empty_backend.dialect)]
    assert second.applied == []
    assert empty_backend.fetch("migrations_applied") == ALL


def test_an_outbox_at_0001_upgrades_with_its_pending_rows(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0002 adds the tenant to a table that already holds events: they keep no tenant
    (and 0003, the consumer's, leaves them alone)."""
    backend = postgres_backend(pg_url)
    first = available("postgres")[:1]
    monkeypatch.setattr("outbox_core.migrate.available", lambda dialect: first)
    assert migrate(backend.url).applied == [1]
    backend.execute("outbox_fill", {"rows": 50})
    monkeypatch.undo()
    assert migrate(backend.url).applied == [2, 3, 4, 5]
    assert {t for _, _, t in backend.fetch("outbox_row_tenants")} == {None}
    assert backend.fetch("migrations_applied") == ALL


def test_concurrent_migrators_apply_once(empty_backend: Backend) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "relay.cli", "migrate", "--database-url", empty_backend.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    applied_lines = [out for out, _ in outputs if "applied: 0001" in out]
    assert len(applied_lines) == 1, outputs
    assert empty_backend.fetch("migrations_applied") == ALL


def test_unknown_migration_is_refused(backend: Backend) -> None:
    backend.execute("migration_forge")
    with pytest.raises(UnknownMigration, match="9999_from_the_future"):
        migrate(backend.url)
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "migrate", "--database-url", backend.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "UnknownMigration" in result.stderr


def test_edited_migration_is_refused(backend: Backend) -> None:
    backend.execute("migration_tamper")
    with pytest.raises(MigrationError, match="changed since it was applied"):
        migrate(backend.url)


def test_shard_count_changes_only_on_an_empty_outbox(backend: Backend) -> None:
    assert migrate(backend.url, shard_count=8).shard_count == 8
    with sync_tx(backend, "driver") as conn:
        Outbox(shard_count=8).emit(conn, topic="t", key="k", event_type="E", payload={})
    with pytest.raises(ConfigurationError, match="unpublished"):
        migrate(backend.url, shard_count=4)
    assert migrate(backend.url).shard_count == 8


def test_cli_reports_bad_configuration_with_exit_2(tmp_path: Path) -> None:
    cases = [
        ["migrate", "--database-url", "mysql://nope"],
        ["migrate", "--database-url", "sqlite:///"],
    ]
    for args in cases:
        result = subprocess.run(
            [sys.executable, "-m", "relay.cli", *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, (args, result.stderr)
        assert "configuration error" in result.stderr
    bad_int = subprocess.run(
        [sys.executable, "-m", "relay.cli", "migrate", "--shard-count", "zero"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_int.returncode == 2
    assert "not an integer" in bad_int.stderr


def test_0004_migrates_an_outbox_holding_rows_whose_headers_are_no_object(
    empty_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0004 checks new writes only: rows written before it (by a writer other than
    producer_lib) do not fail the migration, and stay for the relay to park."""
    backend = empty_backend
    before = available(backend.dialect)[:3]
    monkeypatch.setattr("outbox_core.migrate.available", lambda dialect: before)
    assert migrate(backend.url).applied == [1, 2, 3]
    old = {"topic": "t", "key": "k", "shard": 0, "payload": b"{}", "headers": "[1]"}
    [(old_id,)] = backend.fetch("outbox_insert_hostile", old)
    monkeypatch.undo()
    assert migrate(backend.url).applied == [4, 5]
    assert [(r[0], r[7]) for r in backend.fetch("outbox_rows")] == [
        (old_id, [1] if backend.dialect == "postgres" else "[1]")
    ]


@pytest.mark.parametrize("headers", ["[1]", '"text"', "null", "3", "{not json"])
def test_a_new_row_whose_headers_are_no_object_is_refused(backend: Backend, headers: str) -> None:
    if backend.dialect == "postgres" and headers == "{not json":
        pytest.skip("jsonb refuses text that is not JSON by itself")
    row = {"topic": "t", "key": "k", "shard": 0, "payload": b"{}", "headers": headers}
    with pytest.raises((psycopg.errors.CheckViolation, sqlite3.IntegrityError)) as refused:
        backend.fetch("outbox_insert_hostile", row)
    assert "outbox_events_headers_check" in str(refused.value)
    [(row_id,)] = backend.fetch("outbox_insert_hostile", {**row, "headers": "{}"})
    with pytest.raises((psycopg.errors.CheckViolation, sqlite3.IntegrityError)):
        backend.execute("outbox_headers_set", {"id": row_id, "headers": headers})
    assert backend.scalar("outbox_count") == 1
