"""The one place driver exceptions become ours: classify(exc) -> DatabaseError.

Covers psycopg 3 (its pool's PoolTimeout is an OperationalError), psycopg2, asyncpg,
sqlite3, PyMySQL (and aiomysql, which raises PyMySQL's exceptions), mysqlclient, and the
wrappers of SQLAlchemy and Django around any of them. Whether an error is retriable is
decided here once, from one SQLSTATE table (MariaDB's drivers give the server's error
number instead, and have a table of their own), for every driver and library.
A driver's module is only looked at when it has been imported: an exception cannot come
from a driver nobody loaded, and a service need not install drivers it does not use.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from typing import Any

from outbox_core.errors import (
    DatabaseError,
    MigrationError,
    OutboxError,
    StartupParameterRefused,
    UniqueViolation,
)

# Worth a retry: serialization failure, deadlock, lock not available, admin/crash shutdown,
# cannot connect now, too many connections. Class 08 (connection exceptions) too.
RETRIABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
_UNIQUE_VIOLATION = "23505"
_UNDEFINED_TABLE = "42P01"
_SQLITE_UNIQUE = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})
_MISSING_SCHEMA = "outbox tables are missing, run `outbox-relay migrate`"
_DRIVERS = ("psycopg", "psycopg2", "asyncpg", "sqlite3", "pymysql", "MySQLdb")
# MariaDB/MySQL error numbers. Worth a retry: lock wait timeout, deadlock (InnoDB rolled
# the transaction back), max_statement_time exceeded; cannot connect (socket, TCP), server
# gone away, connection lost during a query.
MARIADB_RETRIABLE = frozenset({1205, 1213, 1969, 2002, 2003, 2006, 2013})
_MARIADB_DUPLICATE_KEY = 1062
_MARIADB_NO_SUCH_TABLE = 1146
# "Duplicate entry '<value>' for key '<name>'" (MySQL 8: '<table>.<name>'). The value is
# the caller's data and may itself hold "for key '...'": the name is the last quoted part.
_MARIADB_KEY_NAME = re.compile(r"for key '([^']*)'\s*$")
# PgBouncer's refusals of a startup parameter ("unsupported startup parameter: options";
# 1.20+: "... in options: statement_timeout", "unsupported options startup parameter: ...").
# libpq reports a failed connection without the SQLSTATE the pooler sent, so its text is
# all there is to go on.
_REFUSED_PARAMETER = re.compile(
    r"unsupported startup parameter(?: in options)?:\s*([A-Za-z_][\w.]*)"
    r"|unsupported options startup parameter"
)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _driver_of(exc: BaseException) -> str | None:
    root = type(exc).__module__.split(".", 1)[0]
    return root if root in _DRIVERS else None


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception inside a wrapper: SQLAlchemy's `.orig` (asyncpg's under
    SQLAlchemy's adapter, as its __cause__), Django's __cause__; else exc itself."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            break
        if _driver_of(seen) is not None:
            return seen
        seen = getattr(seen, "orig", None) or seen.__cause__
    return exc


def _postgres_state(orig: BaseException) -> tuple[str | None, bool] | None:
    """(SQLSTATE, lost-connection-without-state) for a Postgres driver's error, else None."""
    psycopg: Any = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(orig, psycopg.Error):
        lost = isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)
        return orig.sqlstate, lost
    psycopg2: Any = sys.modules.get("psycopg2")
    if psycopg2 is not None and isinstance(orig, psycopg2.Error):
        lost = isinstance(orig, psycopg2.OperationalError | psycopg2.InterfaceError)
        return orig.pgcode, lost
    asyncpg: Any = sys.modules.get("asyncpg")
    if asyncpg is not None and isinstance(orig, asyncpg.PostgresError | asyncpg.InterfaceError):
        # Server errors carry a SQLSTATE; client-side ones do not, and of those only a
        # connection closed under the operation is worth a retry (not a bad parameter).
        state = getattr(orig, "sqlstate", None)
        return state, isinstance(orig, asyncpg.exceptions.ConnectionDoesNotExistError)
    return None


def _mariadb_errno(orig: BaseException) -> tuple[int | None, bool] | None:
    """(error number, lost-connection-without-number) for PyMySQL's and mysqlclient's
    errors, else None. Both raise with args (number, message), the server's number or the
    client library's (2002-2013); a closed connection's InterfaceError may carry no number
    at all (PyMySQL) or 0 (both)."""
    for module, errors in (("pymysql", "err"), ("MySQLdb", "_exceptions")):
        driver: Any = sys.modules.get(module)
        namespace = getattr(driver, errors, None)
        if namespace is not None and isinstance(orig, namespace.MySQLError):
            first = orig.args[0] if orig.args else None
            number = first if type(first) is int else None
            return number, isinstance(orig, namespace.InterfaceError)
    return None


def _mariadb_key_name(orig: BaseException) -> str | None:
    """The duplicate key's name from MariaDB's message: the server sends it nowhere else."""
    message = orig.args[1] if len(orig.args) > 1 else None
    if not isinstance(message, str):
        return None
    found = _MARIADB_KEY_NAME.search(message)
    if found is None:
        return None
    return found.group(1).rpartition(".")[2] or None


def _classify_mariadb(
    orig: BaseException, number: int | None, lost: bool, sa_retriable: bool
) -> OutboxError:
    message = _describe(orig)
    if number == _MARIADB_DUPLICATE_KEY:
        return UniqueViolation(message, constraint=_mariadb_key_name(orig), errno=number)
    if number == _MARIADB_NO_SUCH_TABLE:
        return MigrationError(f"{_MISSING_SCHEMA}: {message}")
    retriable = sa_retriable or number in MARIADB_RETRIABLE or (number in (None, 0) and lost)
    return DatabaseError(message, retriable=retriable, errno=number)


def _constraint_name(orig: BaseException) -> str | None:
    """The violated constraint's name, as each Postgres driver reports it."""
    diag = getattr(orig, "diag", None)  # psycopg 3 and psycopg2
    name = getattr(diag, "constraint_name", None) or getattr(orig, "constraint_name", None)
    return name if isinstance(name, str) else None


def classify(exc: BaseException) -> OutboxError:
    """Our exception for a driver's; ours pass through unchanged. Never raises."""
    if isinstance(exc, OutboxError):
        return exc
    sa_retriable = _sqlalchemy_retriable(exc)
    orig = _driver_error(exc)
    message = _describe(orig)
    postgres = _postgres_state(orig)
    if postgres is not None:
        state, lost = postgres
        refused = _REFUSED_PARAMETER.search(str(orig))
        if refused is not None:
            return StartupParameterRefused(
                f"a connection pooler (PgBouncer) refused the startup parameter "
                f"{refused.group(1) or 'options'}: {message}",
                parameter=refused.group(1),
            )
        if state == _UNIQUE_VIOLATION:
            return UniqueViolation(message, constraint=_constraint_name(orig), sqlstate=state)
        if state == _UNDEFINED_TABLE:
            return MigrationError(f"{_MISSING_SCHEMA}: {message}")
        retriable = (
            sa_retriable
            or state in RETRIABLE_SQLSTATES
            or (state or "").startswith("08")
            or (state is None and lost)
        )
        return DatabaseError(message, retriable=retriable, sqlstate=state)
    if isinstance(orig, sqlite3.Error):
        text = str(orig)
        if getattr(orig, "sqlite_errorname", None) in _SQLITE_UNIQUE:
            # sqlite3 names the key only in its message: "UNIQUE constraint failed: t.c".
            _, _, columns = text.partition("constraint failed: ")
            return UniqueViolation(message, constraint=columns.strip() or None)
        if "no such table" in text:
            return MigrationError(f"{_MISSING_SCHEMA}: {message}")
        retriable = sa_retriable or (
            isinstance(orig, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
        )
        return DatabaseError(message, retriable=retriable)
    mariadb = _mariadb_errno(orig)
    if mariadb is not None:
        return _classify_mariadb(orig, *mariadb, sa_retriable)
    if isinstance(orig, OSError):
        # The socket's own error (asyncpg raises a refused, reset or unresolvable
        # connect as it is): the server or the network away, not the statement.
        return DatabaseError(message, retriable=True)
    return DatabaseError(message, retriable=sa_retriable)


def _sqlalchemy_retriable(exc: BaseException) -> bool:
    """SQLAlchemy's own verdicts: an invalidated connection, or its pool timing out."""
    sa_exc: Any = sys.modules.get("sqlalchemy.exc")
    if sa_exc is None:
        return False
    if isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated)
    return isinstance(exc, sa_exc.TimeoutError)


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for logs: driver messages can run to many lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
