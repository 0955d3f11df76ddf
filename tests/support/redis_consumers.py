"""The Redis path end to end: a relay publishing to Redis, RedisSources applying into the
consumer_effects table, and the checks on what they did."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis

from consumer_lib import ConsumerApp, ConsumerSettings
from consumer_lib.redis_settings import RedisSourceSettings
from consumer_lib.redis_source import RedisSource
from outbox_core.kafka_security import KafkaSecurity
from outbox_core.redis_connection import RedisSettings
from producer_lib import Event, Outbox
from relay.config import RelaySettings, load_settings
from tests.support.consumers import Effect, effect_handler, make_database
from tests.support.db import Backend
from tests.support.relay import FAST
from tests.support.transactions import sync_tx


def redis_relay_settings(backend: Backend, redis_url: str, **over: Any) -> RelaySettings:
    fast = {k: v for k, v in FAST.items() if not k.startswith("kafka")}
    return load_settings(
        database_url=backend.url, transport="redis", redis_url=redis_url, **{**fast, **over}
    )


def emit(backend: Backend, topic: str, n: int, keys: int, per_tx: int = 10, first: int = 0) -> None:
    """n events over `keys` keys, payload {"n": i} from i=first, in transactions of per_tx."""
    outbox = Outbox()
    for start in range(first, first + n, per_tx):
        events = [
            Event(topic, f"key-{i % keys}", "OrderPlaced", {"n": i})
            for i in range(start, min(start + per_tx, first + n))
        ]
        with sync_tx(backend, "driver") as conn:
            outbox.emit_batch(conn, events)


def redis_app(
    backend: Backend, topic: str, group: str, *, applied_by: str = "test", **over: Any
) -> ConsumerApp:
    """A ConsumerApp writing one consumer_effects row per event (sqlalchemy_async).
    The Kafka fields of ConsumerSettings are unused on the Redis path."""
    settings = ConsumerSettings(
        bootstrap_servers="unused:9092",
        group_id=group,
        security=KafkaSecurity.plaintext(),
        backoff_base_s=0.05,
        backoff_max_s=0.5,
        **over,
    )
    app = ConsumerApp(settings, make_database("sqlalchemy_async", backend))
    app.handler(topic)(
        effect_handler("sqlalchemy_async", backend.dialect, group, applied_by=applied_by)
    )
    return app


def source_settings(redis_url: str, name: str, **over: Any) -> RedisSourceSettings:
    defaults: dict[str, Any] = {
        "claim_idle_s": 1.0,
        "claim_interval_s": 0.2,
        "block_ms": 100,
        "gauges_interval_s": 0.2,
    }
    return RedisSourceSettings(
        redis=RedisSettings(url=redis_url), consumer_name=name, **{**defaults, **over}
    )


@contextlib.asynccontextmanager
async def running_source(
    app: ConsumerApp, settings: RedisSourceSettings
) -> AsyncIterator[RedisSource]:
    source = RedisSource(app, settings)
    task = asyncio.create_task(source.run(), name=f"redis-source-{settings.consumer_name}")
    try:
        yield source
    finally:
        source.stop()
        await asyncio.wait_for(task, 60)
        await app.database.close()


def key_order_problems(found: Sequence[Effect]) -> list[str]:
    """Per key, first applications in the order the events were emitted (n ascending)."""
    seen: dict[str | None, list[int]] = defaultdict(list)
    firsts: set[str | None] = set()
    for e in found:
        if e.event_id in firsts or e.n is None:
            continue
        firsts.add(e.event_id)
        seen[e.key].append(e.n)
    return [f"{k}: {ns[:10]}..." for k, ns in seen.items() if ns != sorted(ns)]


async def pending_count(client: Redis, stream: str, group: str) -> int:
    summary: Any = await client.xpending(stream, group)
    return int(summary["pending"])


async def no_pending(client: Redis, stream: str, group: str) -> bool:
    return await pending_count(client, stream, group) == 0


async def ready(value: bool) -> bool:
    """A condition already evaluated, as until() awaits it."""
    return value


ENTRY_ID = "00000000-0000-0000-0000-{:012d}"


async def add_entries(client: Redis, stream: str, n: int, keys: int = 1) -> list[str]:
    """n entries as the relay writes them (JSON payload {"n": i}); their event_ids."""
    for i in range(n):
        await client.xadd(
            stream,
            {
                b"key": f"k{i % keys}".encode(),
                b"payload": f'{{"n": {i}}}'.encode(),
                b"h:event_id": ENTRY_ID.format(i).encode(),
                b"h:content-type": b"application/json",
            },
        )
    return [ENTRY_ID.format(i) for i in range(n)]
