"""Applying migrations/<dialect>/NNNN_name.sql once each, recorded, safe under concurrency.

Postgres serialises migrators with a session advisory lock and applies each migration in
its own transaction; SQLite does all of it inside one BEGIN IMMEDIATE. MariaDB serialises
them with GET_LOCK (a session's) and runs a migration statement by statement, since each
DDL statement commits by itself: its migrations are written to be run again after a run
that stopped half-way, and a migration is recorded once all of its statements ran. A database that
records a migration this code does not have, or one whose file changed since it was
applied, is refused: running old code against a newer schema is how rows get lost.

On Postgres, tables that are already there although no migration recorded them (made by
Alembic from outbox_core.tables, or by a migration's Alembic operations) are adopted: a
migration whose statements collide with existing objects is recorded instead of applied,
but only once outbox_core.schema_match has shown the tables are exactly what the
migrations create.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from outbox_core.database_url import (
    SQLITE_BUSY_TIMEOUT_S,
    DatabaseUrl,
    Dialect,
    MariadbTarget,
    unsupported,
)
from outbox_core.errors import ConfigurationError, DatabaseError, MigrationError, UnknownMigration
from outbox_core.executors import (
    PsycopgExecutor,
    PyMysqlExecutor,
    Rows,
    SqliteExecutor,
    Statement,
    SyncExecutor,
    translated,
)
from outbox_core.schema_match import schema_version
from outbox_core.sharding import DEFAULT_LOCK_NAMESPACE, MAX_SHARDS

DEFAULT_SHARD_COUNT = 16  # what 0001_initial.sql records
# What a migration raises when what it creates is already there: time to compare.
# SQLSTATEs, not psycopg's classes: importing psycopg here would make every producer_lib
# import need it, psycopg2-only services included.
_ALREADY_THERE = frozenset({"42P07", "42701", "42710"})  # duplicate table, column, object

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# How long a MariaDB migrator waits for another's run to end (GET_LOCK's timeout).
MARIADB_LOCK_WAIT_S = 600
# A MariaDB script's pieces: quoted text (any quote, doubled or backslash-escaped quotes
# inside), comments, and the semicolons that end statements.
_MARIADB_TOKEN = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`"
    r"|--[^\n]*|#[^\n]*|/\*.*?\*/|;",
    re.DOTALL,
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class MigrationReport:
    applied: list[int]
    current: int
    shard_count: int
    adopted: list[int] = field(default_factory=list)  # found in the schema, recorded


def available(dialect: Dialect) -> list[Migration]:
    folder = resources.files("outbox_core.migrations") / dialect
    found: list[Migration] = []
    for entry in folder.iterdir():
        m = _FILE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"{dialect} migrations are not numbered 1..n: {versions}")
    return found


def schema_sql(dialect: Dialect) -> str:
    return (resources.files("outbox_core.migrations") / dialect / "schema.sql").read_text("utf-8")


def sqlite_statements(script: str) -> list[str]:
    """Split a SQLite script into statements (sqlite3's executescript would COMMIT first)."""
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise MigrationError(f"unterminated SQL statement: {buf.strip()[:80]!r}")
    return statements


def mariadb_statements(script: str) -> list[str]:
    """Split a MariaDB script into statements at the semicolons outside quotes and comments
    (the server runs one statement per call unless multi-statements are switched on)."""
    pieces: list[str] = []
    start = 0
    for token in _MARIADB_TOKEN.finditer(script):
        if token.group() == ";":
            pieces.append(script[start : token.start()])
            start = token.end()
    tail = script[start:]
    if _MARIADB_TOKEN.sub("", tail).strip():
        raise MigrationError(f"unterminated SQL statement: {tail.strip()[:80]!r}")
    return [p.strip() for p in pieces if _MARIADB_TOKEN.sub("", p).strip()]


def _check_known(recorded: Rows, known: list[Migration]) -> set[int]:
    by_version = {m.version: m for m in known}
    done: set[int] = set()
    for version, name, checksum in recorded:
        mig = by_version.get(int(version))
        if mig is None:
            raise UnknownMigration(
                f"the database records migration {int(version):04d}_{name} which this code "
                f"does not know (it knows up to {len(known):04d}); upgrade this code first"
            )
        if mig.checksum != checksum:
            raise MigrationError(
                f"migration {mig.version:04d}_{mig.name} changed since it was applied "
                "to this database; migrations must never be edited once released"
            )
        done.add(mig.version)
    return done


def _apply_shard_count(db: SyncExecutor, shard_count: int | None) -> int:
    if shard_count is not None and not 1 <= shard_count <= MAX_SHARDS:
        raise ConfigurationError(f"shard_count must be in 1..{MAX_SHARDS}")
    rows = db.run(Statement("setting_get", {"name": "shard_count"}))
    if not rows:  # an adopted schema whose revision did not insert it
        value = str(shard_count or DEFAULT_SHARD_COUNT)
        db.run(Statement("setting_put_missing", {"name": "shard_count", "value": value}))
        rows = db.run(Statement("setting_get", {"name": "shard_count"}))
    recorded = int(rows[0][0])
    if shard_count is None or shard_count == recorded:
        return recorded
    pending = int(db.run(Statement("outbox_count_unpublished"))[0][0])
    if pending:
        raise ConfigurationError(
            f"cannot change shard_count from {recorded} to {shard_count} while {pending} "
            "events are unpublished: drain the outbox first"
        )
    db.run(Statement("setting_put", {"name": "shard_count", "value": str(shard_count)}))
    return shard_count


def migrate(database_url: str, *, shard_count: int | None = None) -> MigrationReport:
    """Apply pending migrations; optionally set shard_count (only on an empty outbox)."""
    db = DatabaseUrl.parse(database_url)
    with translated():
        if db.dialect == "postgres":
            return _migrate_postgres(db, shard_count)
        if db.dialect == "sqlite":
            return _migrate_sqlite(db, shard_count)
        if db.dialect == "mariadb":
            return _migrate_mariadb(db, shard_count)
        raise unsupported(db.dialect, "the migrator")


def _migrate_postgres(db: DatabaseUrl, shard_count: int | None) -> MigrationReport:
    known = available("postgres")
    lock = {"lock_ns": DEFAULT_LOCK_NAMESPACE}
    with db.connect(autocommit=True) as conn:
        pg = PsycopgExecutor(conn)
        pg.run(Statement("migration_lock", lock))
        try:
            pg.run(Statement("migration_table_create"))
            done = _check_known(pg.run(Statement("migration_list")), known)
            applied: list[int] = []
            adopted: list[int] = []
            for mig in known:
                if mig.version in done:
                    continue
                try:
                    with conn.transaction():
                        # No parameters: psycopg sends the file as one simple-protocol script.
                        conn.execute(mig.sql.encode())
                        pg.run(Statement("migration_record", _record(mig)))
                except Exception as exc:
                    if getattr(exc, "sqlstate", None) not in _ALREADY_THERE:
                        raise
                    found = _adopt(conn, known, mig)
                    done |= set(found)
                    adopted += found
                    continue
                applied.append(mig.version)
            with conn.transaction():
                _install_published_rotation(pg)
                count = _apply_shard_count(pg, shard_count)
        finally:
            pg.run(Statement("migration_unlock", lock))
    return MigrationReport(applied, len(known), count, adopted)


def _install_published_rotation(pg: PsycopgExecutor) -> None:
    """What the migrations' tables cannot carry, made on every run (each is idempotent): the
    DEFAULT partition of the kept rows and the function that rotates their partitions. A
    schema made from outbox_core.tables gets them here too (Alembic has neither)."""
    if not pg.run(Statement("outbox_published_exists"))[0][0]:
        return  # a migration run stopped before 0005 (tests do)
    pg.run(Statement("outbox_published_default_create"))
    pg.run(Statement("outbox_published_rotate_install"))
    pg.run(Statement("outbox_published_rotate_revoke"))


def _adopt(conn: Any, known: list[Migration], failed: Migration) -> list[int]:
    """`failed` collided with existing objects: record it, and the migrations after it the
    schema also holds, if the tables are exactly what they create; else refuse."""
    version = schema_version(conn, known)
    if version < failed.version:
        raise MigrationError(
            f"migration {failed.version:04d}_{failed.name} collides with objects already in "
            f"the database, whose outbox tables match migration {version:04d} (recorded: "
            f"up to {failed.version - 1:04d}): the schema was changed by hand"
        )
    found = [m for m in known if failed.version <= m.version <= version]
    pg = PsycopgExecutor(conn)
    with conn.transaction():
        for mig in found:
            pg.run(Statement("migration_record", _record(mig)))
    return [m.version for m in found]


def _record(mig: Migration) -> dict[str, Any]:
    return {"version": mig.version, "name": mig.name, "checksum": mig.checksum}


def _enable_wal(db: SqliteExecutor) -> None:
    # Switching the journal mode needs the file to itself, and SQLite reports "locked"
    # at once rather than waiting in the busy handler, so wait here.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            db.run(Statement("database_wal_enable"))
            return
        except DatabaseError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _migrate_sqlite(db: DatabaseUrl, shard_count: int | None) -> MigrationReport:
    known = available("sqlite")
    conn: sqlite3.Connection = db.connect(autocommit=True)
    try:
        lite = SqliteExecutor(conn)
        _enable_wal(lite)
        lite.run(Statement("database_begin_immediate"))
        try:
            lite.run(Statement("migration_table_create"))
            done = _check_known(lite.run(Statement("migration_list")), known)
            applied: list[int] = []
            for mig in known:
                if mig.version in done:
                    continue
                for statement in sqlite_statements(mig.sql):
                    try:
                        conn.execute(statement)
                    except sqlite3.OperationalError as exc:
                        if "already exists" not in str(exc):
                            raise
                        raise MigrationError(
                            f"migration {mig.version:04d}_{mig.name}: {exc}, yet no migration "
                            "recorded it; existing tables are adopted on Postgres only"
                        ) from exc
                lite.run(Statement("migration_record", _record(mig)))
                applied.append(mig.version)
            count = _apply_shard_count(lite, shard_count)
            lite.run(Statement("database_commit"))
        except BaseException:
            if conn.in_transaction:
                lite.run(Statement("database_rollback"))
            raise
    finally:
        conn.close()
    return MigrationReport(applied, len(known), count)


def _migrate_mariadb(db: DatabaseUrl, shard_count: int | None) -> MigrationReport:
    if MariadbTarget.parse(db.url).database is None:
        raise ConfigurationError(
            "a MariaDB URL for migrations must name its database: mysql://user:password@host/db"
        )
    known = available("mariadb")
    lock = {"lock_ns": DEFAULT_LOCK_NAMESPACE, "timeout_s": MARIADB_LOCK_WAIT_S}
    conn = db.connect(autocommit=True)
    try:
        my = PyMysqlExecutor(conn)
        if my.run(Statement("migration_lock", lock))[0][0] != 1:
            raise MigrationError(
                f"another migrator held this database's migration lock for "
                f"{MARIADB_LOCK_WAIT_S} s: is a migration still running?"
            )
        try:
            my.run(Statement("migration_table_create"))
            done = _check_known(my.run(Statement("migration_list")), known)
            applied: list[int] = []
            for mig in known:
                if mig.version in done:
                    continue
                for statement in mariadb_statements(mig.sql):
                    # No parameters: PyMySQL sends the text as it is (a % stays a %).
                    with translated(), conn.cursor() as cur:
                        cur.execute(statement)
                my.run(Statement("migration_record", _record(mig)))
                applied.append(mig.version)
            conn.begin()
            count = _apply_shard_count(my, shard_count)
            conn.commit()
        finally:
            if conn.open:
                conn.rollback()  # a failed shard_count change, else nothing
                my.run(Statement("migration_unlock", lock))
    finally:
        conn.close()
    return MigrationReport(applied, len(known), count)
