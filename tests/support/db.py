"""One Backend object per database kind, so a scenario is written once and runs on each."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from outbox_core.database_url import DatabaseUrl
from outbox_core.migrate import migrate
from outbox_core.queries import Dialect, parse_blocks

_SQL = Path(__file__).parent / "sql"


def _load(name: str) -> dict[str, str]:
    return parse_blocks((_SQL / name).read_text(), name)


COMMON = _load("inspect.sql")
DIALECT_SQL: dict[Dialect, dict[str, str]] = {
    "postgres": _load("postgres_inspect.sql"),
    "sqlite": _load("sqlite_inspect.sql"),
    "mariadb": _load("mariadb_inspect.sql"),
}


@dataclass(frozen=True)
class Backend:
    dialect: Dialect
    url: str  # a producer_lib database URL
    target: str  # what the drivers connect to: libpq URL, mysql:// URL or file path

    @property
    def sqlalchemy_url(self) -> str:
        if self.dialect == "postgres":
            return self.target.replace("postgresql://", "postgresql+psycopg://", 1)
        if self.dialect == "mariadb":
            return self.target.replace("mysql://", "mysql+pymysql://", 1)
        return f"sqlite:///{self.target}"

    @property
    def async_sqlalchemy_url(self) -> str:
        if self.dialect == "mariadb":
            return self.target.replace("mysql://", "mysql+aiomysql://", 1)
        return self.sqlalchemy_url

    def connect(self) -> Any:
        """A plain driver connection, not in autocommit: its first statement begins."""
        if self.dialect == "postgres":
            return psycopg.connect(self.target)
        if self.dialect == "mariadb":  # PyMySQL, in UTC at READ COMMITTED as outbox_core's
            return DatabaseUrl.parse(self.target).connect()
        return sqlite3.connect(self.target, timeout=30)

    def sql(self, name: str) -> str:
        return DIALECT_SQL[self.dialect].get(name) or COMMON[name]

    def run_on(
        self, conn: Any, name: str, params: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """The named query on an open connection of this backend (no commit): its rows."""
        # Through a cursor: a PyMySQL connection has no execute of its own.
        cur = conn.cursor()
        try:
            cur.execute(self.sql(name), params or {})
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
        finally:
            cur.close()

    def fetch(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            rows = self.run_on(conn, name, params or {})
            conn.commit()
            return rows
        finally:
            conn.close()

    def execute(self, name: str, params: dict[str, Any] | None = None) -> None:
        conn = self.connect()
        try:
            self.run_on(conn, name, params or {})
            conn.commit()
        finally:
            conn.close()

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

    def migrate(self, **kw: Any) -> None:
        migrate(self.url, **kw)


def postgres_backend(libpq_url: str) -> Backend:
    return Backend("postgres", libpq_url, libpq_url)


def mariadb_backend(url: str) -> Backend:
    """url: a mysql:// URL naming the test's own database."""
    return Backend("mariadb", url, url)


def sqlite_backend(path: Path) -> Backend:
    return Backend("sqlite", f"sqlite:///{path}", str(path))
