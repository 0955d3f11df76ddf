"""Database URLs and dialects: which database a URL names, and opening it."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from outbox_core.errors import ConfigurationError

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

    def connect(self, *, autocommit: bool = False, server_options: str | None = None) -> Any:
        """server_options: Postgres only, libpq `options` (`-c name=value ...`)."""
        if self.dialect == "postgres":
            import psycopg

            extra: dict[str, Any] = {"options": server_options} if server_options else {}
            return psycopg.connect(self.url, autocommit=autocommit, **extra)
        Path(self.url).parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(
            self.url,
            timeout=SQLITE_BUSY_TIMEOUT_S,
            isolation_level=None if autocommit else "DEFERRED",
        )
