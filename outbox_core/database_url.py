"""Database URLs and dialects: which database a URL names, and opening it."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from outbox_core.pg_session import SessionSettings

Dialect = Literal["postgres", "sqlite", "mariadb"]
DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite", "mariadb")
# How errors name a dialect to users.
DIALECT_NAMES: dict[Dialect, str] = {
    "postgres": "Postgres",
    "sqlite": "SQLite",
    "mariadb": "MariaDB",
}

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}")
_POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
# MariaDB and MySQL share a protocol and most SQL; PyMySQL speaks to both.
_MARIADB_SCHEMES = ("mysql://", "mariadb://", "mysql+pymysql://", "mariadb+pymysql://")
SQLITE_BUSY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DatabaseUrl:
    dialect: Dialect
    url: str  # for Postgres: a libpq URL; for SQLite: the file path

    @classmethod
    def parse(cls, raw: str) -> DatabaseUrl:
        if not isinstance(raw, str) or not raw:
            raise ConfigurationError("database URL must be a non-empty string")
        for scheme in _POSTGRES_SCHEMES:
            if raw.startswith(scheme):
                return cls("postgres", "postgresql://" + raw[len(scheme) :])
        if raw.startswith("sqlite:///"):
            path = raw[len("sqlite:///") :]
            if not path or path == ":memory:":
                raise ConfigurationError(
                    "a SQLite outbox needs a file: sqlite:///relative/path or sqlite:////abs/path"
                )
            return cls("sqlite", path)
        for scheme in _MARIADB_SCHEMES:
            if raw.startswith(scheme):
                url = "mysql://" + raw[len(scheme) :]
                MariadbTarget.parse(url)  # refused here, before anything connects
                return cls("mariadb", url)
        # Show the scheme only when it is one: the rest of a malformed URL (no "://")
        # may be user:password@host, and errors must never echo a password.
        scheme, sep, _ = raw.partition("://")
        got = f" (got {scheme!r}://...)" if sep and _SCHEME.fullmatch(scheme) else ""
        raise ConfigurationError(
            "database URL must start with postgresql:// (psycopg), mysql:// (MariaDB) or "
            f"sqlite:///{got}"
        )

    def connect(self, *, autocommit: bool = False, session: SessionSettings | None = None) -> Any:
        """session: Postgres only, the connection's settings (outbox_core/pg_session.py);
        behind a transaction pooler its caller sets the server settings per transaction."""
        if self.dialect == "postgres":
            import psycopg

            extra = session.connect_kwargs(self.url) if session is not None else {}
            return psycopg.connect(self.url, autocommit=autocommit, **extra)
        if self.dialect == "mariadb":
            return MariadbTarget.parse(self.url).connect(autocommit=autocommit)
        if self.dialect == "sqlite":
            Path(self.url).parent.mkdir(parents=True, exist_ok=True)
            return sqlite3.connect(
                self.url,
                timeout=SQLITE_BUSY_TIMEOUT_S,
                isolation_level=None if autocommit else "DEFERRED",
            )
        raise unsupported(self.dialect, "outbox_core's connections")


def unsupported(dialect: Dialect, part: str) -> ConfigurationError:
    """The error for a part that cannot run on this dialect yet: it must never fall
    through to another dialect's code."""
    return ConfigurationError(f"{DIALECT_NAMES[dialect]} is not supported by {part} yet")


def supported(dialect: Dialect, part: str, dialects: Collection[Dialect]) -> Dialect:
    """dialect, if part runs on it; else the ConfigurationError of `unsupported`."""
    if dialect not in dialects:
        raise unsupported(dialect, part)
    return dialect


# A database name the outbox's statements may use unquoted; the server allows more.
_MARIADB_DATABASE = re.compile(r"[A-Za-z0-9_$]{1,64}")
_MARIADB_OPTIONS = frozenset({"charset", "unix_socket"})


@dataclass(frozen=True)
class MariadbTarget:
    """What a mysql:// URL names, checked before anything connects. Errors name the part
    that is wrong, never its value: the URL holds a password."""

    host: str
    port: int
    user: str
    password: str
    database: str | None
    unix_socket: str | None = None

    @classmethod
    def parse(cls, url: str) -> MariadbTarget:
        if any(c.isspace() or ord(c) < 32 for c in url):
            raise ConfigurationError("a MariaDB URL may not hold whitespace or control characters")
        try:
            parts = urlsplit(url)
            port = 3306 if parts.port is None else parts.port
            host = parts.hostname or ""
            if port == 0:
                raise ValueError("port 0")
        except ValueError:
            raise ConfigurationError(
                "a MariaDB URL must be mysql://user:password@host:port/database "
                "(its host or port is malformed)"
            ) from None
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(name for name in options if name not in _MARIADB_OPTIONS)
        if unknown or parts.fragment:
            names = ", ".join(repr(n[:32]) for n in unknown) or "a #fragment"
            raise ConfigurationError(
                f"a MariaDB URL takes only the options charset and unix_socket (got {names})"
            )
        if options.get("charset", "utf8mb4") != "utf8mb4":
            raise ConfigurationError("a MariaDB URL's charset must be utf8mb4 (the schema's)")
        if not host and "unix_socket" not in options:
            raise ConfigurationError("a MariaDB URL needs a host: mysql://user:password@host/db")
        database = unquote(parts.path.lstrip("/")) or None
        if database is not None and not _MARIADB_DATABASE.fullmatch(database):
            raise ConfigurationError(
                "a MariaDB URL's database name must be 1-64 letters, digits, _ or $"
            )
        return cls(
            host=host or "localhost",
            port=port,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=database,
            unix_socket=options.get("unix_socket"),
        )

    def login(self) -> dict[str, Any]:
        """What PyMySQL and aiomysql connect with but the database (`database` in the one,
        `db` in the other), in the schema's character set."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "unix_socket": self.unix_socket,
            "charset": "utf8mb4",
        }

    def connect(self, *, autocommit: bool = False) -> Any:
        """A PyMySQL connection in UTC (the schema's times carry no zone) at READ COMMITTED."""
        import pymysql

        from outbox_core.queries import query

        return pymysql.connect(
            **self.login(),
            database=self.database,
            autocommit=autocommit,
            init_command=query("mariadb", "session_init"),
        )


def libpq_options(conninfo: str, ours: str | None) -> str | None:
    """The libpq `options` for a connection that wants ours: ours first, then the user's
    own (the URL's `options`, else PGOPTIONS). An `options` keyword replaces the URL's and
    the environment's, so without this a user's `-c search_path=...` would be dropped; and
    of two `-c` of one name the later wins, so a setting the user gave keeps their value."""
    if not ours:
        return None
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        theirs = conninfo_to_dict(conninfo).get("options")
    except ProgrammingError:
        return ours  # a malformed URL: connecting reports it
    if theirs is None:
        theirs = os.environ.get("PGOPTIONS")
    return f"{ours} {theirs}" if theirs else ours
