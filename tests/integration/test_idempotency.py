"""Idempotency keys (seed 000): same key and body -> same event; different body -> refused."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

import pytest

from producer_lib import IdempotencyConflict, Outbox
from tests.support.db import Backend
from tests.support.transactions import ASYNC_KINDS, SYNC_KINDS, async_tx, sync_tx

pytestmark = pytest.mark.integration


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
RACE_KINDS = ["driver", "psycopg2"]


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
