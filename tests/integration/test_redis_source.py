"""The Redis source's policies with a real Redis and database: a handler that keeps failing
is dead-lettered and acked, a transient failure keeps its entry pending until it applies,
the gauges read XPENDING and XINFO GROUPS, and a Redis restart (AOF on) loses nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from consumer_lib import ConsumedEvent, TransientError
from consumer_lib.redis_source import RedisSource
from tests.support.consumers import (
    effect_problems,
    effects,
    kept_dead_letters,
    new_group,
    prepare,
    processed_ids,
)
from tests.support.db import Backend
from tests.support.ops import http_get, scrape
from tests.support.redis import own_redis, unique_stream_name
from tests.support.redis_consumers import (
    ENTRY_ID,
    add_entries,
    emit,
    key_order_problems,
    no_pending,
    pending_count,
    ready,
    redis_app,
    redis_relay_settings,
    running_source,
    source_settings,
)
from tests.support.relay import expected_from_db, running_relay, wait_drained
from tests.support.waits import until

pytestmark = pytest.mark.integration

ID = ENTRY_ID


async def test_a_handler_that_keeps_failing_is_dead_lettered_and_the_rest_flows(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await add_entries(redis_client, stream, 5)
    app = redis_app(backend, stream, group, max_attempts=3)
    calls: Counter[int] = Counter()

    async def handler(event: ConsumedEvent, session: Any) -> None:
        calls[event.payload["n"]] += 1
        if event.payload["n"] == 2:
            raise ValueError("cannot apply n=2")

    app._handlers.clear()
    app.handler(stream)(handler)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(source.stats.applied == 4), 30, "the others applied")
        await until(lambda: ready(source.stats.dead_lettered == 1), 30, "n=2 dead-lettered")
    assert calls[2] == 3
    assert await pending_count(redis_client, stream, group) == 0
    dead = cast(list[tuple[bytes, dict[bytes, bytes]]], await redis_client.xrange(stream + ".DLT"))
    assert [f[b"dlt.error.type"] for _, f in dead] == [b"ValueError"]
    assert [f[b"dlt.reason"] for _, f in dead] == [b"handler_failed"]
    assert dead[0][1][b"dlt.error.message"] == b"cannot apply n=2"
    assert ID.format(2) not in processed_ids(backend, group)


async def test_a_transient_failure_keeps_the_entry_pending_until_it_applies(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await add_entries(redis_client, stream, 1)
    app = redis_app(backend, stream, group, max_attempts=1)
    failing = asyncio.Event()
    failing.set()
    attempts = 0

    async def handler(event: ConsumedEvent, session: Any) -> None:
        nonlocal attempts
        attempts += 1
        if failing.is_set():
            raise TransientError("database briefly away")

    app._handlers.clear()
    app.handler(stream)(handler)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(attempts >= 3), 30, "retries")
        # Never dead-lettered (transient failures do not count), never acked.
        assert await pending_count(redis_client, stream, group) == 1
        assert source.stats.dead_lettered == 0
        failing.clear()
        await until(lambda: ready(source.stats.applied == 1), 30, "applied")
        await until(lambda: no_pending(redis_client, stream, group), 10, "acked")
    assert processed_ids(backend, group) == {ID.format(0)}


async def test_gauges_show_pending_oldest_age_and_lag(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await add_entries(redis_client, stream, 3)
    await redis_client.xgroup_create(stream, group, id="0")
    await redis_client.xreadgroup(group, "other", {stream: ">"}, count=2)
    await asyncio.sleep(0.3)
    app = redis_app(backend, stream, group)
    source = RedisSource(app, source_settings(redis_url, "c1"))
    try:
        await source.refresh_gauges()
    finally:
        await source._client.aclose()
        await app.database.close()

    def value(name: str) -> float | None:
        return source.metrics.registry.get_sample_value(name, {"stream": stream})

    assert value("outbox_redis_consumer_pending_entries") == 2
    assert value("outbox_redis_consumer_group_lag") == 1
    age = value("outbox_redis_consumer_oldest_pending_age_seconds")
    assert age is not None
    assert 0.3 <= age < 60


async def test_a_redis_restart_mid_run_loses_nothing(backend: Backend, tmp_path: Path) -> None:
    """A Redis of this test's own (AOF on) is restarted while the relay publishes and the
    consumer applies: every event is applied once, in key order, and both carry on."""
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    with own_redis(tmp_path / "redis") as server:
        emit(backend, stream, 400, keys=10)
        expected = [e for ids in expected_from_db(backend).values() for e in ids]
        app = redis_app(backend, stream, group)
        relay_settings = redis_relay_settings(backend, server.url, batch_size=20)
        async with running_source(app, source_settings(server.url, "c1")) as source:
            async with running_relay(relay_settings):
                await until(lambda: ready(source.stats.applied >= 50), 60, "some applied")
                await asyncio.to_thread(server.restart)
                # In a thread: this loop runs the relay and the consumer that hold the lock.
                await asyncio.to_thread(emit, backend, stream, 100, 10, 10, 400)
                expected = [e for ids in expected_from_db(backend).values() for e in ids]
                await wait_drained(backend, 120)
            await until(
                lambda: ready(len(processed_ids(backend, group)) == 500), 120, "all applied"
            )
    found = effects(backend)
    assert effect_problems(found, expected, group) == []
    assert key_order_problems(found) == []


async def test_the_metrics_and_probes_are_served_over_http(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await add_entries(redis_client, stream, 3)
    app = redis_app(backend, stream, group, http_port=0)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(source.stats.applied == 3), 30, "three applied")
        assert source.ops is not None
        port = source.ops.port
        m = await scrape(port)
        readyz = await http_get(port, "/readyz")
        healthz = await http_get(port, "/healthz")
    assert m.value("outbox_redis_consumer_events_processed_total", stream=stream) == 3
    assert m.value("outbox_redis_consumer_pending_entries", stream=stream) is not None
    assert (readyz.status, healthz.status) == (200, 200)


async def test_an_entry_whose_decoding_raises_anything_is_dead_lettered_and_the_rest_flows(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    """JSON nested past the parser's recursion limit raises RecursionError: the entry is
    dead-lettered with it in its fields like any undecodable entry, never a crash."""
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await add_entries(redis_client, stream, 2)
    await redis_client.xadd(
        stream,
        {
            b"key": b"deep",
            b"payload": b"[" * 200_000 + b"]" * 200_000,
            b"h:event_id": ID.format(99).encode(),
            b"h:content-type": b"application/json",
        },
    )
    app = redis_app(backend, stream, group)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(source.stats.applied == 2), 30, "the good entries applied")
        await until(lambda: ready(source.stats.dead_lettered == 1), 30, "the deep one moved")
    assert await pending_count(redis_client, stream, group) == 0
    dead = cast(list[tuple[bytes, dict[bytes, bytes]]], await redis_client.xrange(stream + ".DLT"))
    assert [f[b"dlt.error.type"] for _, f in dead] == [b"PoisonRecord"]
    assert [f[b"dlt.reason"] for _, f in dead] == [b"undecodable"]
    assert b"RecursionError" in dead[0][1][b"dlt.error.message"]


async def test_a_dead_letter_stream_that_refuses_for_good_keeps_the_entry_in_the_database(
    backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    """The dead-letter stream's key holds a string: every XADD to it fails with WRONGTYPE.
    The entry is kept in consumer_dead_letters and acked, and the next entries apply."""
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    await redis_client.set(stream + ".DLT", b"not a stream")
    await redis_client.xadd(
        stream,
        {
            b"key": b"bad",
            b"payload": b"{",
            b"h:event_id": ID.format(7).encode(),
            b"h:content-type": b"application/json",
        },
    )
    await add_entries(redis_client, stream, 2)
    app = redis_app(backend, stream, group)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(source.stats.applied == 2), 30, "the good entries applied")
        await until(lambda: ready(source.stats.dead_letters_kept == 1), 30, "the bad one kept")
    assert await pending_count(redis_client, stream, group) == 0
    kept = kept_dead_letters(backend)
    assert [(k.group, k.topic, k.partition, k.error_type) for k in kept] == [
        (group, stream, -1, "PoisonRecord")
    ]
    assert "WRONGTYPE" in kept[0].refused
    assert ["event_id", ID.format(7)] in kept[0].headers
