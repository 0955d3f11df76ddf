"""consumer_lib's pieces that need no server: its errors under the project's root, which
failures of a record's transaction are transient (retried without limit), handlers of the
wrong kind refused when registered, and the batch settings checked."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import psycopg_pool
import pytest
from sqlalchemy import exc as sa_exc

from consumer_lib import (
    ConsumerApp,
    ConsumerConfigError,
    ConsumerError,
    ConsumerSettings,
    Database,
    HandlerKindError,
    KafkaSecurity,
    PoisonRecord,
    PsycopgAsync,
    SqlAlchemyAsync,
    SqlAlchemySync,
    TransientError,
)
from consumer_lib.database import is_transient
from consumer_lib.work import Job, Work
from outbox_core.errors import DatabaseError, MigrationError, OutboxError
from outbox_core.executors import Statement
from scripts.ports import taken_port


def test_consumer_errors_are_outbox_errors() -> None:
    assert issubclass(ConsumerError, OutboxError)
    assert issubclass(ConsumerConfigError, ValueError)
    assert TransientError("x").retriable
    assert not PoisonRecord("x").retriable


@pytest.mark.parametrize(
    "error",
    [
        TransientError("a dependency is down"),
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
        ConnectionRefusedError("the handler's own call refused"),
        TimeoutError("the handler's own call timed out"),
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


# --------------------------------------------------------------------------- registration


def _app(database: Database) -> ConsumerApp:
    settings = ConsumerSettings(
        bootstrap_servers="127.0.0.1:1", group_id="g", security=KafkaSecurity.plaintext()
    )
    return ConsumerApp(settings, database)


async def async_handler(event: object, session: object) -> None:
    return None


def sync_handler(event: object, session: object) -> None:
    return None


class AsyncCallable:
    async def __call__(self, event: object, session: object) -> None:
        return None


def test_a_sync_adapter_refuses_an_async_handler_naming_it() -> None:
    from sqlalchemy import create_engine

    app = _app(SqlAlchemySync(create_engine("sqlite://")))
    for fn in (async_handler, AsyncCallable()):
        with pytest.raises(TypeError, match=r"async but SqlAlchemySync") as refused:
            app.handler("orders")(fn)
        assert isinstance(refused.value, HandlerKindError)
    with pytest.raises(HandlerKindError, match=r"handler async_handler is async"):
        app.on_batch("orders")(async_handler)
    app.handler("orders", batch=False)(sync_handler)
    assert app.topics == ["orders"]


async def test_async_adapters_refuse_a_sync_handler_naming_it() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    for database in (
        SqlAlchemyAsync(create_async_engine("sqlite+aiosqlite://")),
        PsycopgAsync("postgresql://127.0.0.1:1/none"),
    ):
        app = _app(database)
        adapter = type(database).__name__
        with pytest.raises(TypeError, match=rf"handler sync_handler is sync but {adapter}"):
            app.handler("orders")(sync_handler)
        with pytest.raises(HandlerKindError):
            app.on_batch("orders", "Paid")(sync_handler)
        app.handler("orders")(async_handler)
        app.on_batch("orders", "Paid")(AsyncCallable())
        await database.close()


@pytest.mark.parametrize(
    "over", [{"batch_max_records": 0}, {"batch_max_bytes": 0}], ids=lambda o: next(iter(o))
)
def test_batch_bounds_must_be_positive(over: dict[str, Any]) -> None:
    with pytest.raises(
        ConsumerConfigError, match=f"{next(iter(over))} .*greater than or equal to 1"
    ):
        ConsumerSettings(
            bootstrap_servers="b", group_id="g", security=KafkaSecurity.plaintext(), **over
        )


# --------------------------------------------------------------------------- one transaction's work


def one(event: object, session: object) -> None:
    return None


def bulk(events: object, session: object) -> None:
    return None


def test_work_runs_each_event_recorded_now_once_and_groups_a_bulk_handlers_run() -> None:
    jobs = [
        Job("a", "A", one),
        Job("b", "B", bulk, bulk=True),
        Job("c", "C", bulk, bulk=True),
        Job("a", "A again", one),  # the same event_id twice in one batch
        Job(None, "no id", one),  # missing_event_id="process": always runs
        Job("d", "D", bulk, bulk=True),
        Job("e", "E, applied before", one),
    ]
    work = Work("g", jobs)
    dedup = work.dedup("postgres")
    assert dedup is not None
    assert dedup.query == "processed_event_insert_batch"
    assert dedup.params == {"consumer_group": "g", "event_ids": ["a", "b", "c", "a", "d", "e"]}
    calls = work.calls([("a",), ("b",), ("c",), ("d",)])  # what the statement returned
    assert [(c.handler, c.argument) for c in calls] == [
        (one, "A"),
        (bulk, ["B", "C"]),
        (one, "no id"),
        (bulk, ["D"]),  # not consecutive with B and C: order is kept
    ]
    assert work.applied == [True, True, True, False, True, True, False]
    assert Work("g", [Job(None, "x", one)]).dedup("sqlite") is None
    assert Work("g", [Job("a", "x", one)]).dedup("sqlite") == Statement(
        "processed_event_insert_batch", {"consumer_group": "g", "event_ids": '["a"]'}
    )


async def test_consumer_in_background_raises_what_stopped_the_consumer(tmp_path: Any) -> None:
    """A consumer that failed on its own (here: its ops port is taken) raises at the end
    of the block, instead of the lifespan ending as if all had gone well."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from consumer_lib import consumer_in_background

    with taken_port() as port:
        settings = ConsumerSettings(
            bootstrap_servers="127.0.0.1:1",
            group_id="g",
            security=KafkaSecurity.plaintext(),
            http_port=port,
        )
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/c.sqlite3")
        app = ConsumerApp(settings, SqlAlchemyAsync(engine))

        async def handler(event: Any, session: Any) -> None:
            return None

        app.handler("orders")(handler)
        with pytest.raises(OSError, match="address already in use"):
            async with consumer_in_background(app, stop_timeout_s=30):
                pass
        await engine.dispose()


def test_every_type_the_database_protocol_names_is_public() -> None:
    """A Database of one's own (or a wrapper) needs the types its methods take, from the
    package itself rather than its modules."""
    import typing

    import consumer_lib

    named = {
        hint
        for method in ("apply_work", "apply", "keep_dead_letter")
        for name, hint in typing.get_type_hints(getattr(consumer_lib.Database, method)).items()
        if name != "return" and getattr(hint, "__module__", "").startswith("consumer_lib")
    }
    named.add(consumer_lib.Handler)  # an alias: its hint is the Callable it stands for
    exported = {getattr(consumer_lib, name) for name in consumer_lib.__all__}
    assert named <= exported
    assert {consumer_lib.Work, consumer_lib.DeadLetterRow} <= named
