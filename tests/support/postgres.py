"""Private Postgres databases for tests: empty ones, and migrated ones copied from a
template that is migrated once per test process.

A test owns its database; the databases a process made are dropped when its session ends
(one forced drop per test would cost one checkpoint per test). Tests that check the
migrations themselves take an empty database and migrate it from nothing.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox_core.migrate import migrate
from outbox_core.queries import parse_blocks

_INSPECT_SQL = Path(__file__).parent / "sql" / "postgres_inspect.sql"
_INSPECT = parse_blocks(_INSPECT_SQL.read_text(), _INSPECT_SQL.name)

# Every database a test session makes starts with this; the session's own part follows.
PREFIX = "t_"


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


class Databases:
    """The private databases of one test process (one xdist worker).

    `migrated()` copies a template migrated on first use (CREATE DATABASE ... TEMPLATE);
    `empty()` is a fresh database for tests that migrate, or refuse to migrate, themselves.
    Names carry the session's tag, so `close()` drops exactly this session's databases.
    """

    def __init__(self, admin_url: str, worker: str = "") -> None:
        self.admin_url = admin_url
        self.session = f"{PREFIX}{worker or 'main'}_{uuid.uuid4().hex[:6]}_"
        self._made: list[str] = []
        self._template: str | None = None
        self._lock = threading.Lock()
        self._admin: psycopg.Connection[tuple[object, ...]] | None = None

    def _run(self, statement: sql.Composed) -> None:
        # One admin connection for the session: a connection per database made costs more
        # than the CREATE DATABASE itself. A serial test restarts the server under it: a
        # statement on the dead connection runs again on a new one.
        with self._lock:
            try:
                self._admin_connection().execute(statement)
            except psycopg.OperationalError:
                if self._admin is None or not self._admin.broken:
                    raise
                self._admin = None
                self._admin_connection().execute(statement)

    def _admin_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        deadline = time.monotonic() + 60  # a restarting server takes a few seconds
        while self._admin is None or self._admin.closed:
            try:
                self._admin = psycopg.connect(self.admin_url, autocommit=True)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return self._admin

    def _name(self) -> str:
        return f"{self.session}{uuid.uuid4().hex[:10]}"

    def _create(self, name: str, template: str | None = None) -> str:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        self._run(statement)
        self._made.append(name)
        return name

    def empty(self) -> str:
        return with_database(self.admin_url, self._create(self._name()))

    def migrated(self) -> str:
        """URL of a new database with every migration applied (a copy of the template)."""
        if self._template is None:
            template = self._create(f"{self.session}template")
            url = with_database(self.admin_url, template)
            migrate(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(_INSPECT["template_migrated_minutes_ago"])
            self._template = template
        name = self._create(self._name(), self._template)
        return with_database(self.admin_url, name)

    def close(self) -> None:
        for name in reversed(self._made):
            self._run(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        self._made.clear()
        if self._admin is not None:
            self._admin.close()


def worker_id() -> str:
    """The xdist worker this process is (gw0, gw1 ...), or '' outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")
