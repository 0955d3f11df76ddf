"""MariaDB: the migrator on a real server, and the dialect's executors and errors there."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy

from outbox_core.database_url import DatabaseUrl, MariadbTarget
from outbox_core.errors import ConfigurationError, DatabaseError, MigrationError, UniqueViolation
from outbox_core.executors import (
    MysqldbExecutor,
    PyMysqlExecutor,
    SqlAlchemyExecutor,
    Statement,
)
from outbox_core.migrate import available, mariadb_statements, migrate, schema_sql
from outbox_core.queries import parse_blocks
from outbox_core.sharding import KEY_LOCK_SLOTS
from producer_lib import Outbox
from tests.support.db import mariadb_backend
from tests.support.events import emit_kwargs
from tests.support.mariadb import MariaDatabases
from tests.support.transactions import connect_mysqldb

pytestmark = pytest.mark.integration

_SQL = parse_blocks((Path(__file__).parent.parent / "support/sql/mariadb_inspect.sql").read_text())
ALL = [(m.version, m.name) for m in available("mariadb")]


def fetch(url: str, name: str) -> list[tuple[Any, ...]]:
    conn = DatabaseUrl.parse(url).connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(_SQL[name])
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    names = ["schema_tables", "schema_columns", "schema_indexes", "schema_constraints"]
    return {n: fetch(url, n) for n in [*names, "schema_settings"]}


def test_migrations_produce_schema_sql(mariadb_url: str, mariadb_databases: MariaDatabases) -> None:
    migrate(mariadb_url)
    twin = mariadb_databases.empty()
    conn = DatabaseUrl.parse(twin).connect(autocommit=True)
    try:
        for statement in mariadb_statements(schema_sql("mariadb")):
            with conn.cursor() as cur:
                cur.execute(statement)
    finally:
        conn.close()
    declared = catalog(twin)
    migrated = catalog(mariadb_url)
    # The migrator's own table is not part of the schema the migrations describe.
    for key in ("schema_tables", "schema_columns", "schema_indexes"):
        migrated[key] = [r for r in migrated[key] if r[0] != "outbox_schema_migrations"]
    assert migrated == declared
    assert len(migrated["schema_tables"]) == 9  # the comparison saw the tables
    assert fetch(twin, "key_locks_count") == fetch(mariadb_url, "key_locks_count")


def test_migrate_from_empty_then_again_applies_nothing(mariadb_url: str) -> None:
    first = migrate(mariadb_url)
    second = migrate(mariadb_url)
    assert first.applied == [v for v, _ in ALL]
    assert second.applied == []
    assert fetch(mariadb_url, "migrations_applied") == ALL
    assert first.shard_count == second.shard_count == 16


def test_the_key_lock_slots_are_the_producers(mariadb_url: str) -> None:
    """0006 inserts a row for every slot emit may lock, and runs again without a change."""
    migrate(mariadb_url)
    conn = DatabaseUrl.parse(mariadb_url).connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in mariadb_statements(available("mariadb")[5].sql):
                cur.execute(statement)
    finally:
        conn.close()
    assert fetch(mariadb_url, "key_locks_count") == [(KEY_LOCK_SLOTS, 0, KEY_LOCK_SLOTS - 1)]


def test_shard_count_is_recorded(mariadb_url: str) -> None:
    assert migrate(mariadb_url, shard_count=4).shard_count == 4
    assert fetch(mariadb_url, "schema_settings") == [("shard_count", "4")]
    assert migrate(mariadb_url).shard_count == 4


def test_a_migration_stopped_half_way_runs_again(mariadb_url: str) -> None:
    """DDL commits by itself: a run that stopped inside a migration left some of its
    statements applied and none recorded; the next run applies it whole."""
    conn = DatabaseUrl.parse(mariadb_url).connect(autocommit=True)
    try:
        for statement in mariadb_statements(available("mariadb")[0].sql)[:5]:
            with conn.cursor() as cur:
                cur.execute(statement)
    finally:
        conn.close()
    assert migrate(mariadb_url).applied == [v for v, _ in ALL]
    assert fetch(mariadb_url, "schema_settings") == [("shard_count", "16")]


def test_the_cli_migrates_a_mysql_url(mariadb_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "migrate", "--database-url", mariadb_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "applied: 0001, 0002, 0003, 0004, 0005" in result.stdout


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:{secret}@127.0.0.1:notaport/db",
        "mysql://u:{secret}@127.0.0.1:1/db;DROP DATABASE x",
        "mysql://u:{secret}@127.0.0.1:1/db?init_command=DROP+TABLE+x",
        "mysql://u:{secret}@127.0.0.1:1/db?charset=latin1",
        "mysql://u:{secret}@127.0.0.1:1/db\nx",
    ],
)
def test_a_hostile_url_is_refused_before_connecting(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(**_: Any) -> None:
        raise AssertionError("connected")

    monkeypatch.setattr(pymysql, "connect", never)
    secret = "pw-" + uuid.uuid4().hex
    with pytest.raises(ConfigurationError) as info:
        migrate(url.format(secret=secret))
    assert secret not in str(info.value)


def test_migrate_needs_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pymysql, "connect", lambda **_: pytest.fail("connected"))
    with pytest.raises(ConfigurationError, match="name its database"):
        migrate("mysql://u:p@127.0.0.1:3306/")


def _raw_connection(mariadb_url: str, driver: str) -> Any:
    if driver == "pymysql":
        return MariadbTarget.parse(mariadb_url).connect(autocommit=True)
    return connect_mysqldb(mariadb_backend(mariadb_url), autocommit=True)


_RAW_EXECUTORS = {"pymysql": PyMysqlExecutor, "mysqldb": MysqldbExecutor}


@pytest.mark.parametrize("driver", ["pymysql", "mysqldb"])
def test_duplicate_event_id_names_its_key_on_every_executor(mariadb_url: str, driver: str) -> None:
    """The server's 1062 becomes UniqueViolation with the key's name, through the driver
    raw and through SQLAlchemy; a missing table asks for the migrations."""
    setting = Statement("setting_put_missing", {"name": "x", "value": "1"})
    conn = _raw_connection(mariadb_url, driver)
    try:
        raw = _RAW_EXECUTORS[driver](conn)
        with pytest.raises(MigrationError, match="outbox-relay migrate"):
            raw.run(Statement("setting_get", {"name": "shard_count"}))
        migrate(mariadb_url)
        raw.run(setting)
        assert raw.run(Statement("setting_get", {"name": "x"})) == [("1",)]
        with pytest.raises(UniqueViolation) as info, conn.cursor() as cur:
            cur.execute(_SQL["schema_settings"])  # a live cursor beside the executor's
            raw.run(Statement("migration_record", {"version": 1, "name": "n", "checksum": "c"}))
        assert info.value.constraint == "PRIMARY"
        assert info.value.errno == 1062
    finally:
        conn.close()
    engine = sqlalchemy.create_engine(mariadb_url.replace("mysql://", f"mysql+{driver}://", 1))
    try:
        with engine.begin() as sa_conn:
            executor = SqlAlchemyExecutor(sa_conn)
            assert (executor.dialect, executor.driver) == ("mariadb", driver)
            assert executor.run(Statement("setting_get", {"name": "x"})) == [("1",)]
            with pytest.raises(UniqueViolation) as sa_info:
                executor.run(
                    Statement("migration_record", {"version": 2, "name": "n", "checksum": "c"})
                )
        assert sa_info.value.constraint == "PRIMARY"
    finally:
        engine.dispose()


def test_mysqlclient_errors_are_classified_by_number(mariadb_url: str) -> None:
    """mysqlclient's errors, provoked for real, meet the same table as PyMySQL's: a lock
    wait that times out (1205) and a connection the server ended (2013 or 2006) are
    retriable and carry their number."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    holder, waiter = connect_mysqldb(backend), connect_mysqldb(backend)
    try:
        Outbox().emit(holder, **emit_kwargs())  # holds its key's slot to commit
        with waiter.cursor() as cur:
            cur.execute(backend.sql("session_lock_wait_short"))
        with pytest.raises(DatabaseError) as waited:
            Outbox().emit(waiter, **emit_kwargs())
        assert (waited.value.errno, waited.value.retriable) == (1205, True)
        waiter.rollback()
        backend.run(backend.sql("connection_kill"), {"id": waiter.thread_id()})
        with pytest.raises(DatabaseError) as lost:
            Outbox().emit(waiter, **emit_kwargs())
        assert lost.value.errno in (2006, 2013)
        assert lost.value.retriable is True
        holder.commit()
    finally:
        holder.close()
        waiter.close()
    assert backend.scalar("outbox_count") == 1
