"""One Backend object per database kind, so a scenario is written once and runs on each."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from outbox_core.database_url import MariadbTarget
from outbox_core.migrate import migrate
from outbox_core.queries import Dialect, parse_blocks
from tests.support import mariadb

_SQL = Path(__file__).parent / "sql"


def _load(name: str) -> dict[str, str]:
    return parse_blocks((_SQL / name).read_text(), name)


COMMON = _load("inspect.sql")
DIALECT_SQL: dict[Dialect, dict[str, str]] = {
    "postgres": _load("postgres_inspect.sql"),
    "sqlite": _load("sqlite_inspect.sql"),
    "mariadb": _load("mariadb_inspect.sql"),
}


def _run(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    """A cursor that ran sql. psycopg and sqlite3 run it on the connection (a cursor of
    sqlite3's own, held by a failed statement's traceback, would keep the file locked);
    PyMySQL only on a cursor."""
    if hasattr(conn, "execute"):
        return conn.execute(sql, params)
    cursor = conn.cursor()
    cursor.execute(sql, params or None)  # no parameters, no formatting: a literal % stays
    return cursor


@dataclass(frozen=True)
class Backend:
    dialect: Dialect
    url: str  # a producer_lib database URL
    target: str  # what the drivers connect to: libpq URL, file path or mysql:// URL

    @property
    def sqlalchemy_url(self) -> str:
        if self.dialect == "postgres":
            return self.target.replace("postgresql://", "postgresql+psycopg://", 1)
        if self.dialect == "mariadb":
            return mariadb.sqlalchemy_url(self.target, "pymysql")
        return f"sqlite:///{self.target}"

    @property
    def async_sqlalchemy_url(self) -> str:
        if self.dialect == "mariadb":
            return mariadb.sqlalchemy_url(self.target, "aiomysql")
        if self.dialect == "sqlite":
            return f"sqlite+aiosqlite:///{self.target}"
        return self.sqlalchemy_url

    def connect(self) -> Any:
        """A plain driver connection, not in autocommit: its first statement begins."""
        if self.dialect == "postgres":
            return psycopg.connect(self.target)
        if self.dialect == "mariadb":
            return mariadb.connect(self.target)  # raw PyMySQL: emit takes it as a caller's
        return sqlite3.connect(self.target, timeout=30)

    def sql(self, name: str) -> str:
        return DIALECT_SQL[self.dialect].get(name) or COMMON[name]

    def run_on(
        self, conn: Any, name: str, params: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """The named query on an open connection of this backend (no commit): its rows."""
        cursor = _run(conn, self.sql(name), params or {})
        return [tuple(r) for r in cursor.fetchall()] if cursor.description else []

    def run(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Runs one statement in a transaction of its own; its rows, if it returns any."""
        conn = self.connect()
        try:
            cursor = _run(conn, sql, params or {})
            # A list of tuples from every driver (PyMySQL's fetchall gives a tuple).
            rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
            conn.commit()
            return rows
        finally:
            conn.close()

    def fetch(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self.run(self.sql(name), params)

    def execute(self, name: str, params: dict[str, Any] | None = None) -> None:
        self.run(self.sql(name), params)

    def rewind(self, seconds: float) -> None:
        """Moves every clock column of the outbox tables back by `seconds`: to the relay and
        the consumer, as if that much time had passed."""
        conn = self.connect()
        try:
            for name in DIALECT_SQL[self.dialect]:
                if name.startswith("rewind_"):
                    self.run_on(conn, name, {"s": seconds})
            conn.commit()
        finally:
            conn.close()

    def scalar(self, name: str) -> Any:
        return self.fetch(name)[0][0]

    def lock_waiters(self) -> int:
        """Transactions of this database waiting for a lock another one holds."""
        if self.dialect == "mariadb":
            return len(self.mariadb_waiting_transactions())
        return int(self.scalar("lock_waiters"))

    def mariadb_waiting_transactions(self) -> list[str]:
        """MariaDB: the waiting transactions of this database, as its lock monitor prints
        them (tests.support.mariadb.waiting_transactions says why not innodb_trx)."""
        database = MariadbTarget.parse(self.target).database
        assert database, f"{self.target} names a server, not a database"
        return mariadb.waiting_transactions(self.fetch("innodb_status")[0][2], database)

    def migrate(self, **kw: Any) -> None:
        migrate(self.url, **kw)


def postgres_backend(libpq_url: str) -> Backend:
    return Backend("postgres", libpq_url, libpq_url)


def sqlite_backend(path: Path) -> Backend:
    return Backend("sqlite", f"sqlite:///{path}", str(path))


def mariadb_backend(url: str) -> Backend:
    """A mysql:// URL of a database (tests.support.mariadb.MariaDatabases makes them)."""
    return Backend("mariadb", url, url)
