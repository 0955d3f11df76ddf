"""classify on asyncpg's exceptions (built here; their SQLSTATE is a class attribute) and on
the wrappers around a driver's exception. Real server errors of every driver are raised
against Postgres in tests/integration (test_emit, test_consumer)."""

from __future__ import annotations

import socket
import sqlite3

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc

from outbox_core.driver_errors import classify
from outbox_core.errors import DatabaseError, MigrationError, UniqueViolation


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), True),
        (asyncpg.exceptions.SerializationError("could not serialize"), True),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), True),
        (asyncpg.exceptions.TooManyConnectionsError("too many clients"), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), True),
        (asyncpg.exceptions.ConnectionFailureError("connection failure"), True),  # class 08
        (asyncpg.exceptions.DataError("invalid input for query argument $1"), False),
        (asyncpg.exceptions.InterfaceError("another operation is in progress"), False),
        (asyncpg.exceptions.DivisionByZeroError("division by zero"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_asyncpg_errors_are_retriable_by_sqlstate(error: Exception, retriable: bool) -> None:
    ours = classify(error)
    assert type(ours) is DatabaseError
    assert ours.retriable is retriable
    assert ours.sqlstate == getattr(error, "sqlstate", None)


def test_asyncpg_unique_violation_and_missing_table() -> None:
    assert isinstance(classify(asyncpg.exceptions.UniqueViolationError("dup")), UniqueViolation)
    missing = classify(asyncpg.exceptions.UndefinedTableError('relation "x" does not exist'))
    assert isinstance(missing, MigrationError)
    assert "migrate" in str(missing)


def test_the_driver_error_is_found_inside_sqlalchemy_and_django_style_wrappers() -> None:
    inner = asyncpg.exceptions.DeadlockDetectedError("deadlock detected")

    class AdapterError(Exception):  # SQLAlchemy's asyncpg adapter: the driver's as __cause__
        pass

    adapted = AdapterError("deadlock detected")
    adapted.__cause__ = inner
    wrapped = sa_exc.OperationalError("SELECT 1", {}, adapted)
    assert classify(wrapped).retriable
    assert classify(wrapped).sqlstate == "40P01"  # type: ignore[attr-defined]

    django_style = RuntimeError("deadlock detected")
    django_style.__cause__ = inner
    assert classify(django_style).retriable


def test_an_unknown_exception_is_not_retriable() -> None:
    assert not classify(ValueError("nope")).retriable


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        ConnectionResetError(104, "Connection reset by peer"),
        socket.gaierror(-3, "Temporary failure in name resolution"),
        TimeoutError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_socket_error_of_a_connect_is_retriable(error: OSError) -> None:
    """asyncpg raises these as they are when it cannot connect (no driver type around)."""
    ours = classify(error)
    assert type(ours) is DatabaseError
    assert ours.retriable


def test_a_unique_violation_names_its_key_as_a_value_not_in_its_text() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT UNIQUE, c TEXT, d TEXT)")
    db.execute("CREATE UNIQUE INDEX t_cd ON t (c, d)")
    db.execute("INSERT INTO t VALUES (1, 'x', 'y', 'z')")
    names = {}
    for label, row in (
        ("b", (2, "x", "1", "1")),
        ("cd", (3, "2", "y", "z")),
        ("a", (1, "3", "", "")),
    ):
        try:
            db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", row)
        except sqlite3.IntegrityError as exc:
            ours = classify(exc)
            assert isinstance(ours, UniqueViolation)
            names[label] = ours.constraint
    assert names == {"b": "t.b", "cd": "t.c, t.d", "a": "t.a"}
    # A NOT NULL failure is an integrity error too, but no unique key.
    db.execute("CREATE TABLE n (v TEXT NOT NULL)")
    with pytest.raises(sqlite3.IntegrityError) as caught:
        db.execute("INSERT INTO n VALUES (NULL)")
    assert not isinstance(classify(caught.value), UniqueViolation)


def test_a_postgres_unique_violation_takes_the_drivers_constraint_name() -> None:
    error = asyncpg.exceptions.UniqueViolationError("duplicate key value")
    error.constraint_name = "outbox_events_event_id_key"
    ours = classify(error)
    assert isinstance(ours, UniqueViolation)
    assert ours.constraint == "outbox_events_event_id_key"
    assert ours.sqlstate == "23505"
    # A driver that names no constraint: None, never a guess from the message.
    unnamed = classify(asyncpg.exceptions.UniqueViolationError("outbox_events_event_id_key"))
    assert isinstance(unnamed, UniqueViolation)
    assert unnamed.constraint is None
