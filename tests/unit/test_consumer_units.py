"""consumer_lib's pieces that need no server: its errors under the project's root, and
which failures of a record's transaction are transient (retried without limit)."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
import pytest
from sqlalchemy import exc as sa_exc

from consumer_lib import ConsumerConfigError, ConsumerError, PoisonRecord, TransientError
from consumer_lib.database import is_transient
from outbox_core.errors import DatabaseError, MigrationError, OutboxError


def test_consumer_errors_are_outbox_errors() -> None:
    assert issubclass(ConsumerError, OutboxError)
    assert issubclass(ConsumerConfigError, ValueError)
    assert TransientError("x").retriable
    assert not PoisonRecord("x").retriable


@pytest.mark.parametrize(
    "error",
    [
        TransientError("a dependency is down"),
        ConnectionRefusedError("refused"),
        TimeoutError("timed out"),
        DatabaseError("translated by an executor", retriable=True),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.LockNotAvailable("could not obtain lock"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"),
        sqlite3.OperationalError("database is locked"),
        sa_exc.OperationalError("INSERT", {}, Exception("gone"), connection_invalidated=True),
        sa_exc.OperationalError("INSERT", {}, psycopg.errors.DeadlockDetected("deadlock")),
        sa_exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_transient(error: BaseException) -> None:
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("the handler's own failure"),
        PoisonRecord("never"),
        DatabaseError("translated, not retriable", retriable=False),
        MigrationError("outbox tables are missing"),
        psycopg.errors.UniqueViolation("duplicate key"),
        sqlite3.IntegrityError("NOT NULL constraint failed"),
        sa_exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")),
    ],
    ids=lambda e: type(e).__name__,
)
def test_not_transient(error: BaseException) -> None:
    assert not is_transient(error)
