"""A login of each part's own, holding exactly the part's block of
migrations/<dialect>/grants.sql, on Postgres (roles) and MariaDB (accounts), and probes of
what a login may and may not do (tests/support/sql/privileges.sql, the same statements on
both).

The logins are unique per test and dropped on the way out: on Postgres their privileges in
the database first, then the roles; on MariaDB the accounts, which takes their grants.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outbox_core.migrate import mariadb_statements
from outbox_core.queries import Dialect, parse_blocks
from tests.support import mariadb, ops

_SQL = Path(__file__).parent / "sql"
MARIADB_SQL = parse_blocks((_SQL / "privileges_mariadb.sql").read_text(), "privileges_mariadb.sql")
MARIADB_GRANTS = ops.ROOT / "migrations" / "mariadb" / "grants.sql"
# What a refused probe answers: Postgres's SQLSTATE insufficient_privilege; MariaDB's error
# number for a table privilege it lacks (ER_TABLEACCESS_DENIED_ERROR).
DENIED: dict[Dialect, str] = {"postgres": "42501", "mariadb": "1142"}


@dataclass(frozen=True)
class PartLogins:
    dialect: Dialect
    urls: dict[str, str]  # part -> the database URL logging in as that part

    @property
    def denied(self) -> str:
        return DENIED[self.dialect]

    def probe(self, part: str, name: str) -> str | None:
        """Runs a probe of privileges.sql as the part (rolled back where the database can):
        None when allowed, else the refusal's SQLSTATE or error number."""
        if self.dialect == "postgres":
            return ops.probe(self.urls[part], name)
        return _mariadb_probe(self.urls[part], ops.PRIVILEGES_SQL[name])


@contextlib.contextmanager
def part_logins(
    dialect: Dialect,
    admin_url: str,
    database_url: str,
    parts: Sequence[str],
    *,
    name_tail: str = "",
) -> Iterator[PartLogins]:
    """One login per part with its grants on database_url. admin_url may create logins;
    database_url's login owns the tables (it runs the grants). name_tail (MariaDB): the
    accounts' names end with it, whatever characters it holds."""
    if dialect == "postgres":
        with ops.login_roles(admin_url, database_url, parts) as made:
            roles = {f"{part}_role": role for part, (role, _) in made.items()}
            for part in parts:
                ops.grant(database_url, part, roles)
            yield PartLogins(
                dialect,
                {part: ops.with_user(database_url, r, pw) for part, (r, pw) in made.items()},
            )
        return
    with _mariadb_accounts(admin_url, parts, name_tail) as made:
        _mariadb_grant(database_url, parts, {part: user for part, (user, _) in made.items()})
        yield PartLogins(
            dialect,
            {part: ops.with_user(database_url, u, pw) for part, (u, pw) in made.items()},
        )


@contextlib.contextmanager
def _mariadb_accounts(
    admin_url: str, parts: Sequence[str], tail: str
) -> Iterator[dict[str, tuple[str, str]]]:
    # Account names are server-wide, hence random (and at most 80 characters).
    made = {p: (f"t_{p}_{uuid.uuid4().hex[:10]}{tail}", f"pw-{uuid.uuid4().hex}") for p in parts}
    conn = mariadb.connect(admin_url, autocommit=True)
    try:
        with conn.cursor() as cur:
            for user, password in made.values():
                cur.execute(MARIADB_SQL["user_create"], {"user": user, "password": password})
        yield made
    finally:
        with conn.cursor() as cur:
            for user, _ in made.values():
                cur.execute(MARIADB_SQL["user_drop"], {"user": user})
        conn.close()


def _mariadb_grant(database_url: str, parts: Sequence[str], users: dict[str, str]) -> None:
    """Runs the parts' blocks of grants.sql statement by statement, as the mariadb client
    does with the file, in a session whose variables name the accounts."""
    blocks = parse_blocks(MARIADB_GRANTS.read_text(), "grants.sql")
    conn = mariadb.connect(database_url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(
                MARIADB_SQL["grant_accounts"],
                {name: users.get(name, "") for name in ("producer", "relay", "consumer")},
            )
            for part in parts:
                # A block comes without its last semicolon.
                for statement in mariadb_statements(blocks[f"grants_{part}"] + ";"):
                    cur.execute(statement)  # no parameters: the file's % stays as written
    finally:
        conn.close()


def _mariadb_probe(url: str, statement: str) -> str | None:
    import pymysql  # type: ignore[import-untyped, import-not-found, unused-ignore]

    conn: Any = mariadb.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    except pymysql.err.MySQLError as exc:
        return str(exc.args[0])
    finally:
        conn.rollback()
        conn.close()
    return None
