"""The relay's stores in tests: one per backend, and rows to put them to work on.

Rows are written the way services write them (producer_lib's Outbox in a committed
transaction); what the stores did is read back with the named queries in sql/.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from outbox_core.sharding import shard_for
from producer_lib import Event, Outbox
from relay.database import DatabaseSettings
from relay.database import make_store as make_sql_store
from relay.store import ClaimedRow, ClaimRequest, Settled, SettleRequest, Store
from tests.support.db import Backend
from tests.support.transactions import sync_tx

SHARD_COUNT = 16  # what the migrations record by default


def make_store(backend: Backend) -> Store:
    return make_sql_store(DatabaseSettings(database_url=SecretStr(backend.url)))


async def claim(store: Store, *request: Any, **fields: Any) -> list[ClaimedRow]:
    """store.claim(ClaimRequest(...)), the request's fields given as arguments."""
    return await store.claim(ClaimRequest(*request, **fields))


async def settle(store: Store, *request: Any, **fields: Any) -> Settled:
    """store.settle(SettleRequest(...)), the request's fields given as arguments."""
    return await store.settle(SettleRequest(*request, **fields))


@contextlib.asynccontextmanager
async def opened_store(backend: Backend) -> AsyncIterator[Store]:
    store = make_store(backend)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def keys_on_shard(shard: int, count: int, prefix: str = "k") -> list[str]:
    """`count` distinct keys that producer_lib puts on `shard` (deterministic)."""
    keys: list[str] = []
    i = 0
    while len(keys) < count:
        key = f"{prefix}-{i}"
        if shard_for(key, SHARD_COUNT) == shard:
            keys.append(key)
        i += 1
    return keys


def event(key: str, *, topic: str = "orders", event_type: str = "OrderPlaced", **kw: Any) -> Event:
    return Event(topic, key, event_type, kw.pop("payload", {"key": key}), **kw)


def emit(backend: Backend, *events: Event) -> list[int]:
    """Commits the events in one transaction, in order; returns their row ids."""
    with sync_tx(backend, "driver") as conn:
        event_ids = Outbox(shard_count=SHARD_COUNT).emit_batch(conn, events)
    ids = {str(r[1]): int(r[0]) for r in backend.fetch("outbox_rows")}
    return [ids[str(e)] for e in event_ids]


@dataclass(frozen=True)
class RowState:
    id: int
    attempts: int
    status: str
    last_error: str | None
    published: bool
    available_in_s: float  # on the database clock; negative once available


def row_states(backend: Backend) -> dict[int, RowState]:
    return {
        int(i): RowState(int(i), int(a), str(s), e, bool(p), float(t))
        for i, a, s, e, p, t in backend.fetch("outbox_row_state")
    }


def lease_remaining(backend: Backend) -> dict[int, tuple[str | None, int, float | None]]:
    """shard -> (owner, token, seconds left on the database clock or None once released)."""
    return {
        int(s): (o, int(t), None if left is None else float(left))
        for s, o, t, left in backend.fetch("lease_remaining")
    }


def snapshot(backend: Backend) -> list[tuple[Any, ...]]:
    """Every outbox row as stored (payload, headers, state), for 'nothing changed' checks."""
    return backend.fetch("outbox_snapshot")


def ids_of(rows: Sequence[Any]) -> list[int]:
    return [int(r.id) for r in rows]
