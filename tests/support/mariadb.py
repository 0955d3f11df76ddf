"""Private MariaDB databases for tests, on the server MARIADB_URL names (`scripts/services up`
starts Debian's mariadb-server; scripts/test always sets the variable).

As on Postgres (tests/support/postgres.py), a test owns its database, and the databases a
test process made are dropped when its session ends.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from typing import Any

import pytest

from outbox_core.database_url import MariadbTarget
from tests.support.postgres import PREFIX, with_database

_NO_MARIADB = (
    "MARIADB_URL is not set: run `scripts/services up --only mariadb` and "
    '`eval "$(scripts/services env)"`, or use scripts/test, which always sets it.'
)


def mariadb_admin_url() -> str:
    """MARIADB_URL (a server URL with the right to create databases); skips the test when
    it is unset."""
    url = os.environ.get("MARIADB_URL")
    if not url:
        pytest.skip(_NO_MARIADB)
    return url


def connect(url: str, **options: Any) -> Any:
    """A PyMySQL connection to the database `url` names (none for a server URL)."""
    import pymysql  # type: ignore[import-untyped, import-not-found, unused-ignore]

    # The project's own reading of the URL, without the relay's session settings: a test
    # connection is what a caller of emit holds (REPEATABLE READ, the server's zone).
    target = MariadbTarget.parse(url)
    return pymysql.connect(**{**target.login(), "database": target.database, **options})


def sqlalchemy_url(url: str, driver: str) -> str:
    """The mysql:// URL as SQLAlchemy takes it, on `driver` (pymysql, aiomysql)."""
    return url.replace("mysql://", f"mysql+{driver}://", 1) + "?charset=utf8mb4"


def quote_name(name: str) -> str:
    """`name` as a MariaDB identifier, whatever it holds."""
    return "`" + name.replace("`", "``") + "`"


# The line after a waiting transaction's "TRX HAS BEEN WAITING" names the table it waits on.
_WAIT = re.compile(
    r"TRX HAS BEEN WAITING \d+ us FOR THIS LOCK TO BE GRANTED:\n"
    r"(?:RECORD LOCKS .*? of table|TABLE LOCK table) `((?:[^`]|``)+)`\."
)


def waiting_transactions(innodb_status: str, database: str) -> list[str]:
    """The transactions of SHOW ENGINE INNODB STATUS waiting for a lock on a table of
    `database`, each as the monitor prints it (its statement, the lock it waits for).

    Not information_schema.innodb_trx: the server fills it from one cache, refreshed only
    when nobody read it for 100 ms. Tests polling it side by side kept it stale for each
    other, and a waiting transaction went unseen until its 50 s lock wait timed out. The
    monitor is built when asked."""
    blocks = innodb_status.split("\n---TRANSACTION ")[1:]
    return [
        "---TRANSACTION " + block
        for block in blocks
        if any(m.group(1).replace("``", "`") == database for m in _WAIT.finditer(block))
    ]


class MariaDatabases:
    """The private MariaDB databases of one test process (one xdist worker). Names carry
    the session's tag, so `close()` drops exactly this session's databases."""

    def __init__(self, admin_url: str, worker: str = "") -> None:
        self.admin_url = admin_url
        self.session = f"{PREFIX}{worker or 'main'}_{uuid.uuid4().hex[:6]}_"
        self._made: list[str] = []
        self._lock = threading.Lock()
        self._admin: Any = None

    def _run(self, statement: str) -> None:
        # One admin connection for the session, as on Postgres. A statement on a connection
        # the server closed (idle timeout, restart) runs again on a new one.
        import pymysql  # type: ignore[import-untyped, import-not-found, unused-ignore]

        with self._lock:
            try:
                self._execute(statement)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                if self._admin is None or self._admin.open:
                    raise
                self._admin = None
                self._execute(statement)

    def _execute(self, statement: str) -> None:
        if self._admin is None:
            self._admin = connect(self.admin_url, autocommit=True)
        with self._admin.cursor() as cur:
            cur.execute(statement)

    def empty(self) -> str:
        """URL of a new, empty database of this test's own."""
        name = f"{self.session}{uuid.uuid4().hex[:10]}"
        self._run(f"CREATE DATABASE {quote_name(name)}")
        self._made.append(name)
        return with_database(self.admin_url, name)

    def close(self) -> None:
        for name in reversed(self._made):
            self._run(f"DROP DATABASE IF EXISTS {quote_name(name)}")
        self._made.clear()
        if self._admin is not None:
            self._admin.close()
            self._admin = None
