"""Database URLs and dialects: which database a URL names, and opening it."""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from outbox_core.pg_session import SessionSettings

Dialect = Literal["postgres", "sqlite"]
DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite")

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}")
_POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
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
        # Show the scheme only when it is one: the rest of a malformed URL (no "://")
        # may be user:password@host, and errors must never echo a password.
        scheme, sep, _ = raw.partition("://")
        got = f" (got {scheme!r}://...)" if sep and _SCHEME.fullmatch(scheme) else ""
        raise ConfigurationError(
            f"database URL must start with postgresql:// (psycopg) or sqlite:///{got}"
        )

    def connect(self, *, autocommit: bool = False, session: SessionSettings | None = None) -> Any:
        """session: Postgres only, the connection's settings (outbox_core/pg_session.py);
        behind a transaction pooler its caller sets the server settings per transaction."""
        if self.dialect == "postgres":
            import psycopg

            extra = session.connect_kwargs(self.url) if session is not None else {}
            return psycopg.connect(self.url, autocommit=autocommit, **extra)
        Path(self.url).parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(
            self.url,
            timeout=SQLITE_BUSY_TIMEOUT_S,
            isolation_level=None if autocommit else "DEFERRED",
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
