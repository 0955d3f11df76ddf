"""The one place driver exceptions become ours: classify(exc) -> DatabaseError.

Covers psycopg 3 (its pool's PoolTimeout is an OperationalError), sqlite3 and SQLAlchemy's wrappers of either. Whether an
error is retriable is decided here once, from one SQLSTATE table, for every library.
"""

from __future__ import annotations

import sqlite3

import psycopg

from outbox_core.errors import DatabaseError, MigrationError, OutboxError, UniqueViolation

# Worth a retry: serialization failure, deadlock, lock not available, admin/crash shutdown,
# cannot connect now, too many connections. Class 08 (connection exceptions) too.
RETRIABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
_UNIQUE_VIOLATION = "23505"
_UNDEFINED_TABLE = "42P01"
_MISSING_SCHEMA = "outbox tables are missing, run `outbox-relay migrate`"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def classify(exc: BaseException) -> OutboxError:
    """Our exception for a driver's; ours pass through unchanged. Never raises."""
    if isinstance(exc, OutboxError):
        return exc
    sa_retriable = _sqlalchemy_retriable(exc)
    orig: BaseException = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps DBAPI errors
    message = _describe(orig)
    if isinstance(orig, psycopg.Error):
        state = orig.sqlstate
        if state == _UNIQUE_VIOLATION:
            return UniqueViolation(message, retriable=False, sqlstate=state)
        if state == _UNDEFINED_TABLE:
            return MigrationError(f"{_MISSING_SCHEMA}: {message}")
        retriable = (
            sa_retriable
            or state in RETRIABLE_SQLSTATES
            or (state or "").startswith("08")
            or (
                state is None
                and isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)
            )
        )
        return DatabaseError(message, retriable=retriable, sqlstate=state)
    if isinstance(orig, sqlite3.Error):
        text = str(orig)
        if isinstance(orig, sqlite3.IntegrityError) and "UNIQUE constraint failed" in text:
            return UniqueViolation(message, retriable=False)
        if "no such table" in text:
            return MigrationError(f"{_MISSING_SCHEMA}: {message}")
        retriable = sa_retriable or (
            isinstance(orig, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
        )
        return DatabaseError(message, retriable=retriable)
    if isinstance(orig, ConnectionError | TimeoutError):
        return DatabaseError(message, retriable=True)
    return DatabaseError(message, retriable=sa_retriable)


def _sqlalchemy_retriable(exc: BaseException) -> bool:
    """SQLAlchemy's own verdicts: an invalidated connection, or its pool timing out."""
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated)
    return isinstance(exc, sa_exc.TimeoutError)


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for logs: driver messages can run to many lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
