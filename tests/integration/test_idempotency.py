"""Idempotency keys (seed 000): same key and body -> same event; different body -> refused."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from producer_lib import (
    Event,
    EventEmitter,
    IdempotencyConflict,
    InvalidEvent,
    Outbox,
    RecordingOutbox,
)
from tests.support.db import Backend, mariadb_backend
from tests.support.transactions import ASYNC_KINDS, SYNC_KINDS, async_tx, sync_tx

pytestmark = pytest.mark.integration


@pytest.fixture
def backend(emit_backend: Backend) -> Backend:
    """Every database producer_lib emits to (tests/conftest.py's `backend` is the relay's)."""
    return emit_backend


def _emit(outbox: Outbox, conn: Any, payload: object, key: str = "pay-1") -> uuid.UUID:
    return outbox.emit(
        conn,
        topic="payments",
        key="acct-1",
        event_type="Charged",
        payload=payload,
        idempotency_key=key,
    )


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_same_key_same_body_returns_the_first_event(backend: Backend, kind: str) -> None:
    outbox = Outbox()
    with sync_tx(backend, "driver") as conn:
        first = _emit(outbox, conn, {"cents": 100})
    with sync_tx(backend, kind) as conn:
        again = _emit(
            outbox,
            conn,
            {"cents": 100},
        )
        again_in_tx = _emit(outbox, conn, {"cents": 100})
    assert first == again == again_in_tx
    assert backend.scalar("outbox_count") == 1
    assert backend.scalar("idempotency_count") == 1


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_same_key_different_body_is_a_conflict(backend: Backend, kind: str) -> None:
    outbox = Outbox()
    with sync_tx(backend, kind) as conn:
        first = _emit(outbox, conn, {"cents": 100})
    with pytest.raises(IdempotencyConflict) as info, sync_tx(backend, kind) as conn:
        _emit(outbox, conn, {"cents": 999})
    assert info.value.existing_event_id == str(first)
    assert backend.scalar("outbox_count") == 1


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_same_key_returns_the_first_event_and_a_new_body_conflicts(
    backend: Backend, kind: str
) -> None:
    outbox = Outbox()

    async def emit(conn: Any, payload: object) -> uuid.UUID:
        return await outbox.emit_async(
            conn,
            topic="payments",
            key="acct-1",
            event_type="Charged",
            payload=payload,
            idempotency_key="pay-1",
        )

    async with async_tx(backend, kind) as conn:
        first = await emit(conn, {"cents": 100})
    async with async_tx(backend, kind) as conn:
        assert await emit(conn, {"cents": 100}) == first
    with pytest.raises(IdempotencyConflict) as info:
        async with async_tx(backend, kind) as conn:
            await emit(conn, {"cents": 999})
    assert info.value.existing_event_id == str(first)
    assert backend.scalar("outbox_count") == 1
    assert backend.scalar("idempotency_count") == 1


def test_key_released_by_rollback(backend: Backend) -> None:
    outbox = Outbox()
    with pytest.raises(RuntimeError), sync_tx(backend, "driver") as conn:
        _emit(outbox, conn, {"cents": 100})
        raise RuntimeError("business rule failed")
    with sync_tx(backend, "driver") as conn:
        _emit(outbox, conn, {"cents": 555})
    assert backend.scalar("outbox_count") == 1


# The raw drivers: the second writer blocks in the database on the first one's key.
RACE_KINDS = ["driver", "psycopg2", "mysqldb"]


def _racing_second(
    backend: Backend, payload: object, kind: str = "driver"
) -> tuple[threading.Thread, dict[str, Any]]:
    """Starts a second writer of the same key that will block behind the first one."""
    out: dict[str, Any] = {}

    def second() -> None:
        try:
            with sync_tx(backend, kind) as conn:
                out["id"] = _emit(Outbox(), conn, payload)
        except BaseException as exc:
            out["error"] = exc

    return threading.Thread(target=second), out


@pytest.mark.parametrize("kind", RACE_KINDS)
@pytest.mark.parametrize("first_outcome", ["commit", "rollback"])
def test_race_on_one_key(backend: Backend, first_outcome: str, kind: str) -> None:
    """Two transactions use one key at once: exactly one event results, whoever wins."""
    outbox = Outbox()
    thread, out = _racing_second(backend, {"cents": 100}, kind)
    expect = (
        pytest.raises(RuntimeError) if first_outcome == "rollback" else contextlib.nullcontext()
    )
    with expect, sync_tx(backend, kind) as conn:
        first = _emit(outbox, conn, {"cents": 100})
        thread.start()
        time.sleep(0.5)  # the second writer is now waiting on our key
        assert "id" not in out
        if first_outcome == "rollback":
            raise RuntimeError("first writer gives up")
    thread.join(30)
    assert "error" not in out, out
    assert backend.scalar("outbox_count") == 1
    if first_outcome == "commit":
        assert out["id"] == first
    else:
        assert out["id"] != first


@pytest.mark.parametrize("kind", RACE_KINDS)
def test_race_with_different_bodies_conflicts(backend: Backend, kind: str) -> None:
    outbox = Outbox()
    thread, out = _racing_second(backend, {"cents": 200}, kind)
    with sync_tx(backend, kind) as conn:
        _emit(outbox, conn, {"cents": 100})
        thread.start()
        time.sleep(0.5)
    thread.join(30)
    assert isinstance(out.get("error"), IdempotencyConflict), out
    assert backend.scalar("outbox_count") == 1


def test_a_key_committed_after_the_snapshot_is_found_at_repeatable_read(
    mariadb_url: str,
) -> None:
    """MariaDB at REPEATABLE READ (its default): the caller's snapshot predates the commit
    of the key's first use. The insert sees the key (a duplicate check reads the latest
    row); the read of its event must too, or the key would look held by nothing."""
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    late = backend.connect()
    try:
        with late.cursor() as cur:
            cur.execute(backend.sql("session_repeatable_read"))
            cur.execute(backend.sql("snapshot_open"))
        with sync_tx(backend, "driver") as conn:
            first = _emit(Outbox(), conn, {"cents": 100})
        assert _emit(Outbox(), late, {"cents": 100}) == first
        late.commit()
    finally:
        late.close()
    assert backend.scalar("outbox_count") == 1


# ------------------------------------------- RecordingOutbox and the SQL path give one verdict

BODY: dict[str, Any] = {
    "topic": "payments",
    "key": "acct-1",
    "event_type": "Charged",
    "payload": {"cents": 100},
    "headers": {"x-source": "api"},
    "idempotency_key": "pay-1",
}
# (step, what replaces BODY's argument, the outcome): "new" is an event of its own, "first"
# the first step's event, "conflict" IdempotencyConflict naming it, "invalid" InvalidEvent
# on idempotency_key. A step that fails rolls its transaction back.
SCENARIO: list[tuple[str, dict[str, Any], str]] = [
    ("first", {}, "new"),
    ("same-body", {}, "first"),
    ("another-event-id", {"event_id": uuid.uuid4()}, "first"),
    ("another-delay", {"deliver_after": dt.timedelta(hours=1)}, "first"),
    ("another-payload", {"payload": {"cents": 999}}, "conflict"),
    ("payload-key-order", {"payload": {"cents": 100, "x": 1}}, "conflict"),
    ("another-header", {"headers": {"x-source": "batch"}}, "conflict"),
    ("no-headers", {"headers": None}, "conflict"),
    ("another-topic", {"topic": "refunds"}, "conflict"),
    ("another-key", {"key": "acct-2"}, "conflict"),
    ("another-type", {"event_type": "Refunded"}, "conflict"),
    ("a-tenant", {"tenant": "acme"}, "conflict"),
    ("same-body-after-conflicts", {}, "first"),
    ("another-case", {"idempotency_key": "PAY-1"}, "new"),
    ("trailing-space", {"idempotency_key": "pay-1 "}, "new"),
    ("empty-key", {"idempotency_key": ""}, "invalid"),
    ("blank-key", {"idempotency_key": "   "}, "invalid"),
    ("over-long-key", {"idempotency_key": "k" * 256}, "invalid"),
    ("longest-key", {"idempotency_key": "k" * 255}, "new"),
    ("nul-in-key", {"idempotency_key": "pay-1\x00"}, "invalid"),
    ("key-not-str", {"idempotency_key": 1}, "invalid"),
    ("non-ascii-key", {"idempotency_key": "pay-1-\u00e9\U0001f4b3"}, "new"),
]

Transaction = Callable[[], contextlib.AbstractContextManager[tuple[EventEmitter, Any]]]


def _both(backend: Backend) -> dict[str, Transaction]:
    """A RecordingOutbox and an Outbox on backend, each giving (emitter, conn) inside a
    transaction that commits unless its block raises."""
    recorder, outbox = RecordingOutbox(), Outbox()

    @contextlib.contextmanager
    def recorded() -> Iterator[tuple[EventEmitter, Any]]:
        with recorder.transaction():
            yield recorder, None

    @contextlib.contextmanager
    def written() -> Iterator[tuple[EventEmitter, Any]]:
        with sync_tx(backend, "driver") as conn:
            yield outbox, conn

    return {"recorder": recorded, "database": written}


def _outcomes(tx: Transaction) -> list[str]:
    """Each step's outcome, event ids named by the step that first returned them."""
    firsts: dict[uuid.UUID, str] = {}
    outcomes: list[str] = []
    for step, override, _ in SCENARIO:
        try:
            with tx() as (emitter, conn):
                got = emitter.emit(conn, **{**BODY, **override})
        except IdempotencyConflict as exc:
            outcomes.append(f"conflict with {firsts.get(uuid.UUID(exc.existing_event_id))}")
        except InvalidEvent as exc:
            outcomes.append(f"invalid {exc.field}")
        else:
            outcomes.append(firsts.setdefault(got, step))
    return outcomes


EXPECTED = [
    {
        "new": step,
        "first": "first",
        "conflict": "conflict with first",
        "invalid": "invalid idempotency_key",
    }[outcome]
    for step, _, outcome in SCENARIO
]


def test_the_recorder_and_the_database_give_the_same_verdicts(backend: Backend) -> None:
    both = _both(backend)
    assert _outcomes(both["recorder"]) == EXPECTED
    assert _outcomes(both["database"]) == EXPECTED
    assert backend.scalar("outbox_count") == sum(o == "new" for _, _, o in SCENARIO)


def _batch_outcomes(tx: Transaction) -> list[object]:
    """The same key within a batch, in a batch that fails, and after a rollback."""
    same = Event("payments", "acct-1", "Charged", {"cents": 1}, idempotency_key="pay-9")
    other = Event("payments", "acct-1", "Charged", {"cents": 2}, idempotency_key="pay-9")
    spare = Event("payments", "acct-2", "Charged", {}, idempotency_key="pay-8")
    outcomes: list[object] = []
    with contextlib.suppress(RuntimeError), tx() as (emitter, conn):
        emitter.emit_batch(conn, [same])
        raise RuntimeError("the business transaction gives up: pay-9 is free again")
    with tx() as (emitter, conn):
        first, again = emitter.emit_batch(conn, [other, other])
        outcomes.append(first == again)
    with contextlib.suppress(IdempotencyConflict), tx() as (emitter, conn):
        emitter.emit_batch(conn, [spare, same])
        outcomes.append("no conflict")
    with tx() as (emitter, conn):
        outcomes.append(emitter.emit_batch(conn, [other]) == [first])
        outcomes.append(emitter.emit_batch(conn, [spare]) != [first])
    return outcomes


def test_the_recorder_and_the_database_agree_within_a_batch_and_after_a_rollback(
    backend: Backend,
) -> None:
    both = _both(backend)
    assert _batch_outcomes(both["recorder"]) == [True, True, True]
    assert _batch_outcomes(both["database"]) == [True, True, True]
    assert backend.scalar("outbox_count") == 2
