"""Relay -> Redis Streams -> consumer_lib on every database backend, with a real Redis:
each committed event applied exactly once, per key in order; poison dead-lettered; pending
entries of a vanished consumer claimed; trimmed pending entries reported as lost."""

from __future__ import annotations

from typing import Any, cast

import pytest
from redis.asyncio import Redis

from consumer_lib.redis_entries import decode_entry
from tests.support.consumers import effect_problems, effects, new_group, prepare, processed_ids
from tests.support.db import Backend
from tests.support.redis import unique_stream_name
from tests.support.redis_consumers import (
    emit,
    key_order_problems,
    no_pending,
    ready,
    redis_app,
    redis_relay_settings,
    running_source,
    source_settings,
)
from tests.support.relay import expected_from_db, running_relay, wait_drained
from tests.support.waits import until

pytestmark = pytest.mark.integration


def _all_ids(backend: Backend) -> list[str]:
    return [e for ids in expected_from_db(backend).values() for e in ids]


async def test_relay_to_redis_to_consumer_applies_each_event_once_in_key_order(
    empty_backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(empty_backend)
    topic, group = unique_stream_name("orders"), new_group()
    emit(backend, topic, 600, keys=20)
    expected = _all_ids(backend)
    app = redis_app(backend, topic, group)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        async with running_relay(redis_relay_settings(backend, redis_url, batch_size=100)):
            await wait_drained(backend)
        await until(lambda: ready(len(processed_ids(backend, group)) == 600), 60, "all applied")
        await until(lambda: no_pending(redis_client, topic, group), 10, "all acked")
    found = effects(backend)
    assert effect_problems(found, expected, group) == []
    assert key_order_problems(found) == []
    assert source.stats.applied == 600
    assert source.stats.dead_lettered == 0
    assert await redis_client.xlen(topic) == 600  # never trimmed unless configured


async def test_a_poison_entry_is_dead_lettered_with_its_origin_and_acked(
    empty_backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(empty_backend)
    topic, group = unique_stream_name("orders"), new_group()
    good = b"00000000-0000-0000-0000-000000000001"
    await redis_client.xadd(topic, {b"key": b"k", b"payload": b"{}", b"h:event_id": b"not-a-uuid"})
    await redis_client.xadd(
        topic,
        {
            b"key": b"k",
            b"payload": b'{"n": 1}',
            b"h:event_id": good,
            b"h:content-type": b"application/json",
        },
    )
    app = redis_app(backend, topic, group)
    async with running_source(app, source_settings(redis_url, "c1")) as source:
        await until(lambda: ready(source.stats.applied == 1), 30, "the good entry applied")
        await until(lambda: no_pending(redis_client, topic, group), 10, "both acked")
    assert source.stats.dead_lettered == 1
    dead = cast(list[tuple[bytes, dict[bytes, bytes]]], await redis_client.xrange(topic + ".DLT"))
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields[b"h:event_id"] == b"not-a-uuid"
    assert fields[b"dlt.origin.stream"] == topic.encode()
    assert fields[b"dlt.error.type"] == b"PoisonRecord"
    assert fields[b"dlt.group"] == group.encode()
    assert processed_ids(backend, group) == {good.decode()}


async def test_entries_of_a_vanished_consumer_are_claimed_and_applied_once(
    empty_backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    """Consumer "gone" read every entry and died: half before its commit, half after the
    commit and before XACK (its processed_events rows exist). Another consumer claims all
    of them after claim_idle_s: the first half is applied, the second skipped, all acked."""
    backend = prepare(empty_backend)
    topic, group = unique_stream_name("orders"), new_group()
    emit(backend, topic, 40, keys=4)
    async with running_relay(redis_relay_settings(backend, redis_url)):
        await wait_drained(backend)
    expected = _all_ids(backend)
    await redis_client.xgroup_create(topic, group, id="0")
    read: Any = await redis_client.xreadgroup(group, "gone", {topic: ">"})
    assert len(read[0][1]) == 40
    # "gone" committed the second half before dying: its transactions, as the source runs
    # them before XACK (dedup row and handler's write in one transaction).
    committed = expected[20:]
    gone = redis_app(backend, topic, group, applied_by="gone")
    handler = gone.find(topic, None)
    assert handler is not None
    entries = {f[b"h:event_id"].decode(): (i, f) for i, f in read[0][1]}
    for event_id in committed:
        entry_id, fields = entries[event_id]
        event = decode_entry(topic, entry_id, fields)
        assert await gone.database.apply(group, event_id, handler.fn, event)
    await gone.database.close()
    app = redis_app(backend, topic, group, applied_by="claimer")
    async with running_source(app, source_settings(redis_url, "claimer", claim_idle_s=0.5)) as s:
        await until(lambda: no_pending(redis_client, topic, group), 30, "all claimed and acked")
    assert s.stats.redelivered == 40
    assert s.stats.applied == 20
    assert s.stats.duplicates == 20
    assert effect_problems(effects(backend), expected, group) == []


async def test_pending_entries_trimmed_away_are_counted_lost_not_applied(
    empty_backend: Backend, redis_url: str, redis_client: Redis
) -> None:
    backend = prepare(empty_backend)
    topic, group = unique_stream_name("orders"), new_group()
    for i in range(5):
        await redis_client.xadd(topic, {b"key": b"k", b"payload": str(i).encode()})
    await redis_client.xgroup_create(topic, group, id="0")
    await redis_client.xreadgroup(group, "gone", {topic: ">"})
    await redis_client.xtrim(topic, maxlen=0)
    app = redis_app(backend, topic, group)
    async with running_source(app, source_settings(redis_url, "c1", claim_idle_s=0.1)) as s:
        await until(lambda: ready(s.stats.lost == 5), 30, "the trimmed entries reported")
        await until(lambda: no_pending(redis_client, topic, group), 10, "PEL cleared")
    assert s.stats.applied == 0
    assert s.stats.dead_lettered == 0
    assert processed_ids(backend, group) == set()
