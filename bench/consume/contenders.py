"""The contenders of bench/consumer_throughput.py, each applying a whole topic to Postgres with
the same applied_orders INSERT: a plain aiokafka loop without and with consumer_lib's dedup
insert, and consumer_lib's Consumer with PsycopgAsync or SqlAlchemyAsync."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer

from bench.consume.clock import Clock, ClockedDatabase
from bench.shared.database import load_sql
from bench.shared.orders import EVENT_TYPE
from consumer_lib import (
    ConsumedEvent,
    Consumer,
    ConsumerApp,
    ConsumerSettings,
    Database,
    Handler,
    PsycopgAsync,
    SqlAlchemyAsync,
)
from outbox_core.kafka_security import KafkaSecurity
from outbox_core.queries import query

SQL = load_sql("consumer.sql")

BASELINE = "plain aiokafka, no dedup"
BATCHED = "plain aiokafka, batched transactions, no dedup"
LIB = "consumer_lib PsycopgAsync"
SQLALCHEMY = "consumer_lib SqlAlchemyAsync"


# Runs in which consumer_lib met database or broker failures: their rate is not clean.
DISTURBED: list[str] = []


INSERT = SQL["applied_order_insert"]


DEDUP = query("postgres", "processed_event_insert")


def insert_params(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "order_id": payload["order_id"],
        "customer": payload["customer_id"],
        "amount_cents": payload["amount_cents"],
    }


@dataclass(frozen=True)
class Target:
    bootstrap: str
    topic: str
    group: str
    conninfo: str
    total: int
    timeout_s: float


Contender = Callable[[Target], Awaitable[float]]


def plain(dedup: bool, batched: bool = False) -> Contender:
    """batched: one transaction per partition's share of a fetch (consumer_lib's default
    batch bounds hold: a fetch is at most 500 records), one row INSERT per event in it."""

    async def run(t: Target) -> float:
        clock = Clock(t.total)
        conn = await psycopg.AsyncConnection.connect(t.conninfo)  # not autocommit
        kafka = AIOKafkaConsumer(
            t.topic,
            bootstrap_servers=t.bootstrap,
            group_id=t.group,
            client_id="bench-plain",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await kafka.start()
        deadline = time.monotonic() + t.timeout_s
        try:
            while clock.count < t.total:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"plain: {clock.count}/{t.total} in {t.timeout_s:.0f}s")
                batch = await kafka.getmany(timeout_ms=500, max_records=500)
                for tp, records in batch.items():
                    clock.start()
                    if batched:
                        async with conn.transaction():
                            for record in records:
                                await conn.execute(INSERT, insert_params(json.loads(record.value)))
                        clock.committed(len(records))
                        await kafka.commit({tp: records[-1].offset + 1})
                        continue
                    for record in records:
                        payload = json.loads(record.value)
                        async with conn.transaction():
                            if dedup:
                                event_id = dict(record.headers)["event_id"].decode()
                                cur = await conn.execute(
                                    DEDUP, {"consumer_group": t.group, "event_id": event_id}
                                )
                                if await cur.fetchone() is None:
                                    raise AssertionError("the benchmark has no duplicates")
                            await conn.execute(INSERT, insert_params(payload))
                        clock.committed()
                    await kafka.commit({tp: records[-1].offset + 1})
        finally:
            await kafka.stop()
            await conn.close()
        return clock.rate()

    return run


def consumer_lib(adapter: str, concurrency: int = 4) -> Contender:
    async def run(t: Target) -> float:
        clock = Clock(t.total)
        database: Database
        handler: Handler
        if adapter == "psycopg":
            database = PsycopgAsync(t.conninfo, max_connections=8)

            async def on_psycopg(event: ConsumedEvent, conn: Any) -> None:
                await conn.execute(INSERT, insert_params(event.payload))

            handler = on_psycopg
        else:
            from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

            engine = create_async_engine(
                "postgresql+psycopg://" + t.conninfo.split("://", 1)[1], pool_size=8
            )
            database = SqlAlchemyAsync(engine)

            async def on_session(event: ConsumedEvent, session: AsyncSession) -> None:
                conn = await session.connection()
                await conn.exec_driver_sql(INSERT, insert_params(event.payload))

            handler = on_session
        settings = ConsumerSettings(
            security=KafkaSecurity.plaintext(),
            bootstrap_servers=t.bootstrap,
            group_id=t.group,
            client_id="bench-consumer-lib",
            max_concurrent_partitions=concurrency,
            create_dead_letter_topics=False,
        )
        app = ConsumerApp(settings, ClockedDatabase(database, clock))
        app.handler(t.topic, EVENT_TYPE)(handler)
        consumer = Consumer(app)
        task = asyncio.create_task(consumer.run())
        try:
            waiter = asyncio.create_task(clock.done.wait())
            finished, _ = await asyncio.wait(
                {task, waiter}, timeout=t.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            if task in finished:
                task.result()
                raise RuntimeError("consumer_lib stopped by itself")
            if not clock.done.is_set():
                raise TimeoutError(
                    f"consumer_lib: {clock.count}/{t.total} in {t.timeout_s:.0f}s, {consumer.stats}"
                )
        finally:
            consumer.stop()
            await asyncio.wait_for(task, 60)
        stats = consumer.stats
        if stats.processed != t.total or stats.duplicates:
            raise AssertionError(f"consumer_lib applied {stats}")
        if stats.transient_retries or stats.commit_failures:
            DISTURBED.append(
                f"{t.group}: {stats.transient_retries} transient retries, "
                f"{stats.commit_failures} failed offset commits (a server was away?)"
            )
        return clock.rate()

    return run


@dataclass(frozen=True)
class Variant:
    name: str
    run: Contender
    multi_partition_only: bool = False


def variants(with_sqlalchemy: bool) -> list[Variant]:
    out = [
        Variant(BASELINE, plain(dedup=False)),
        Variant("plain aiokafka + dedup insert", plain(dedup=True)),
        Variant(BATCHED, plain(dedup=False, batched=True)),
        Variant(LIB, consumer_lib("psycopg")),
        Variant(
            "consumer_lib PsycopgAsync, 1 partition at a time",
            consumer_lib("psycopg", concurrency=1),
            multi_partition_only=True,
        ),
    ]
    if with_sqlalchemy:
        out.append(Variant(SQLALCHEMY, consumer_lib("sqlalchemy")))
    return out
