"""One source for shard_count: the database's outbox_settings. Outbox() and the relay read
it; a value given to either must equal it, or it is refused before anything is written."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from outbox_core.sharding import shard_for
from producer_lib import ConfigurationError, Event, Outbox, ShardCountMismatch
from producer_lib.serialization import JsonSerializer, Serialized
from relay.errors import StartupRefused
from relay.service import check_database
from relay.store import Store
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import relay_env, relay_settings, running_relay, wait_drained
from tests.support.transactions import async_tx, sync_tx

pytestmark = pytest.mark.integration

KEYS = [f"order-{i}" for i in range(20)]


def _event(topic: str, key: str) -> dict[str, Any]:
    return {"topic": topic, "key": key, "event_type": "OrderPlaced", "payload": {"k": key}}


def _shards(backend: Backend) -> dict[str, int]:
    return {row[3]: row[4] for row in backend.fetch("outbox_rows")}


@pytest.mark.parametrize("kind", ["driver", "sa_session"])
def test_outbox_takes_the_database_shard_count(emit_backend: Backend, kind: str) -> None:
    backend = emit_backend
    backend.migrate(shard_count=5)
    outbox = Outbox()
    with sync_tx(backend, kind) as conn:
        outbox.emit(conn, **_event("orders", KEYS[0]))
        outbox.emit_batch(conn, [Event(**_event("orders", k)) for k in KEYS[1:]])
    assert outbox.shard_count == 5
    assert _shards(backend) == {k: shard_for(k, 5) for k in KEYS}


def test_an_emit_begun_before_another_thread_learns_the_shard_count_uses_it(
    pg: Backend,
) -> None:
    """Web apps share one Outbox between threads. Thread B's emit begins while the Outbox
    does not know the database's shard_count yet and is held (in its serializer) until
    thread A's emit has learned it: B must neither be refused nor write the default
    count's shard."""
    pg.migrate(shard_count=5)
    a_done = threading.Event()
    b_inside = threading.Event()
    plain = JsonSerializer()

    def serializer(payload: object) -> Serialized:
        if payload == {"k": "late"}:
            b_inside.set()
            assert a_done.wait(30)
        return plain(payload)

    outbox = Outbox(serializer=serializer)

    def write(key: str) -> None:
        with sync_tx(pg, "driver") as conn:
            outbox.emit(conn, **_event("orders", key))

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(write, "late")  # 5 of 16 shards, 3 of 5
        assert b_inside.wait(30)
        write("first")
        a_done.set()
        held.result()
    assert _shards(pg) == {k: shard_for(k, 5) for k in ("late", "first")}


async def test_outbox_takes_the_database_shard_count_async(emit_backend: Backend) -> None:
    backend = emit_backend
    backend.migrate(shard_count=3)
    outbox = Outbox()
    async with async_tx(backend, "sa_async_session") as conn:
        await outbox.emit_batch_async(conn, [Event(**_event("orders", k)) for k in KEYS])
    assert _shards(backend) == {k: shard_for(k, 3) for k in KEYS}


@pytest.mark.parametrize("batch", [False, True], ids=["emit", "emit_batch"])
def test_a_disagreeing_shard_count_is_refused_and_nothing_written(
    emit_backend: Backend, batch: bool
) -> None:
    backend = emit_backend
    backend.migrate(shard_count=8)
    outbox = Outbox(shard_count=16)
    with pytest.raises(ShardCountMismatch) as err, sync_tx(backend, "driver") as conn:
        if batch:
            outbox.emit_batch(conn, [Event(**_event("orders", "k"))])
        else:
            outbox.emit(conn, **_event("orders", "k"))
    assert (err.value.configured, err.value.recorded) == (16, 8)
    assert "leave shard_count out" in str(err.value)
    assert backend.scalar("outbox_count") == 0


@pytest.mark.parametrize("bad", [0, -1, 10**6, True, "16", 2.0])
def test_a_malformed_shard_count_is_refused_at_construction(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="shard_count"):
        Outbox(shard_count=bad)


async def test_the_relay_takes_the_database_shard_count(store: Store, backend: Backend) -> None:
    backend.migrate(shard_count=6)
    assert await check_database(store, None) == 6
    assert await check_database(store, 6) == 6
    with pytest.raises(StartupRefused, match=r"mismatch.*leave OUTBOX_SHARD_COUNT unset"):
        await check_database(store, 16)


async def test_a_relay_without_shard_count_publishes_every_shard(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    backend.migrate(shard_count=6)
    topic = await new_topic("shards")
    with sync_tx(backend, "driver") as conn:
        Outbox().emit_batch(conn, [Event(**_event(topic, k)) for k in KEYS])
    settings = relay_settings(backend, kafka_bootstrap)
    assert settings.shard_count is None
    async with running_relay(settings) as service:
        await wait_drained(backend)
        assert service.leases.shard_count == 6
    assert {row[0] for row in backend.fetch("lease_rows")} == set(range(6))


def test_the_relay_cli_refuses_a_disagreeing_shard_count(
    backend: Backend, kafka_bootstrap: str
) -> None:
    backend.migrate(shard_count=8)
    result = subprocess.run(
        [sys.executable, "-m", "relay.cli", "run"],
        env=relay_env(backend, kafka_bootstrap, shard_count=4),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "shard_count mismatch: the relay is configured with 4, the database records 8" in (
        result.stderr
    )
