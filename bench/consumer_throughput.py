"""Events per second applied from Kafka to Postgres: consumer_lib with dedup against a plain
aiokafka consumer doing the same database write without dedup, in one run.

Every event is a ~300-byte JSON order (1,000 keys) with the relay's headers (event_id,
event_type, content-type), put once on a 1-partition and on a 6-partition topic. Applying
one event = one transaction that inserts one applied_orders row from the payload. Contenders,
each reading a whole topic from the beginning under a new consumer group:

- plain:           AIOKafkaConsumer (auto-commit off) + one psycopg AsyncConnection; per
                   event BEGIN, INSERT, COMMIT; after each partition's share of a getmany
                   batch, commit that partition's offset (as consumer_lib does). No dedup.
- plain + dedup:   the same loop plus consumer_lib's own processed_events insert in the
                   transaction: what the dedup statement itself costs.
- consumer_lib:    Consumer(ConsumerApp) with PsycopgAsync, default settings (up to 4
                   partitions at once); the handler runs the same INSERT on its connection.
- consumer_lib, 1 partition at a time: max_concurrent_partitions=1 (multi-partition topics).
- consumer_lib SqlAlchemyAsync (--sqlalchemy): AsyncSession, same INSERT.

Events/s = N / (time the N-th event's transaction committed - time the first record was
handed to processing): start-up and group join are not counted. The contenders run
interleaved in rounds (the order rotates each round), with the tables truncated before each
run; the report gives each one's median over the rounds and its ratio to plain on the same
topic.

    eval "$(.venv/bin/python scripts/services.py env)"
    .venv/bin/python bench/consumer_throughput.py [--events 20000] [--rounds 3]

A private database bench_<random> on DATABASE_URL's server and topics bench-consumer-* are
created and removed at the end. It is a measurement: exit 0 whatever the ratio, non-zero
only on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from bench.emit_overhead import (  # noqa: E402
    DISTINCT_KEYS,
    EVENT_TYPE,
    admin,
    load_sql,
    make_orders,
    markdown_table,
    order_payload,
    server_version,
    with_database,
)
from consumer_lib import (  # noqa: E402
    ConsumedEvent,
    Consumer,
    ConsumerApp,
    ConsumerSettings,
    Database,
    PsycopgAsync,
    SqlAlchemyAsync,
)
from consumer_lib.database import Handler  # noqa: E402
from outbox_core.database_url import DatabaseUrl  # noqa: E402
from outbox_core.kafka_security import KafkaSecurity  # noqa: E402
from outbox_core.queries import query  # noqa: E402
from producer_lib import Outbox, migrate  # noqa: E402

SQL = load_sql("consumer.sql")
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


# --------------------------------------------------------------------------- topics


async def fill_topics(
    bootstrap: str, prefix: str, partition_counts: Sequence[int], events: int, seed: int
) -> tuple[dict[int, str], int]:
    """One topic per partition count, each holding the same `events` orders; returns the
    topics and the payload size."""
    import random

    rng = random.Random(seed)
    orders = make_orders(rng, events)
    outbox = Outbox()
    serialized = [outbox.serializer(order_payload(i + 1, o)) for i, o in enumerate(orders)]
    records = [
        (
            o.customer.encode(),
            s.data,
            [
                ("event_id", str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()),
                ("event_type", EVENT_TYPE.encode()),
                ("content-type", s.content_type.encode()),
            ],
        )
        for o, s in zip(orders, serialized, strict=True)
    ]
    topics = {n: f"{prefix}-p{n}" for n in partition_counts}
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        await client.create_topics(
            [NewTopic(t, num_partitions=n, replication_factor=1) for n, t in topics.items()]
        )
    finally:
        await client.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=10
    )
    await producer.start()
    try:
        for topic in topics.values():
            futures = [
                await producer.send(topic, value, key=key, headers=headers)
                for key, value, headers in records
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return topics, len(serialized[0].data)


async def drop_topics(bootstrap: str, topics: Sequence[str]) -> None:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        await client.delete_topics(list(topics))
    finally:
        await client.close()


# --------------------------------------------------------------------------- contenders


@dataclass
class Clock:
    """When the first record was taken up and when the total-th transaction committed."""

    total: int
    first: float | None = None
    last: float | None = None
    count: int = 0

    def __post_init__(self) -> None:
        self.done = asyncio.Event()

    def start(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def committed(self) -> None:
        self.count += 1
        if self.count == self.total:
            self.last = time.perf_counter()
            self.done.set()

    def rate(self) -> float:
        if self.first is None or self.last is None:
            raise RuntimeError("the clock did not run")
        return self.total / (self.last - self.first)


class ClockedDatabase:
    """consumer_lib's Database with the clock around apply (one call and a counter more)."""

    def __init__(self, inner: Database, clock: Clock) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.clock = clock

    async def apply(self, group: str, event_id: str | None, call: Handler, event: Any) -> bool:
        self.clock.start()
        applied = await self.inner.apply(group, event_id, call, event)
        self.clock.committed()
        return applied

    async def purge(self, retention_s: float, limit: int) -> int:
        return await self.inner.purge(retention_s, limit)

    async def close(self) -> None:
        await self.inner.close()


@dataclass(frozen=True)
class Target:
    bootstrap: str
    topic: str
    group: str
    conninfo: str
    total: int
    timeout_s: float


Contender = Callable[[Target], Awaitable[float]]


def plain(dedup: bool) -> Contender:
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
                    for record in records:
                        clock.start()
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
        Variant("plain aiokafka, no dedup", plain(dedup=False)),
        Variant("plain aiokafka + dedup insert", plain(dedup=True)),
        Variant("consumer_lib PsycopgAsync", consumer_lib("psycopg")),
        Variant(
            "consumer_lib PsycopgAsync, 1 partition at a time",
            consumer_lib("psycopg", concurrency=1),
            multi_partition_only=True,
        ),
    ]
    if with_sqlalchemy:
        out.append(Variant("consumer_lib SqlAlchemyAsync", consumer_lib("sqlalchemy")))
    return out


BASELINE = "plain aiokafka, no dedup"
LIB = "consumer_lib PsycopgAsync"


# --------------------------------------------------------------------------- report


@dataclass
class Result:
    partitions: int
    name: str
    rates: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def print_table(results: Sequence[Result]) -> None:
    """A Markdown table, to paste into docs/benchmarks.md as it is."""
    base = {r.partitions: r for r in results if r.name == BASELINE}
    rows = [
        (
            "partitions",
            "contender",
            "median ev/s",
            "min ev/s",
            "max ev/s",
            "ms/event",
            "ratio to plain",
            "paired ratio",
        )
    ]
    for r in results:
        b = base[r.partitions]
        ratio = r.median / b.median
        paired = statistics.median(v / w for v, w in zip(r.rates, b.rates, strict=True))
        rows.append(
            (
                str(r.partitions),
                r.name,
                f"{r.median:.0f}",
                f"{min(r.rates):.0f}",
                f"{max(r.rates):.0f}",
                f"{1000 / r.median:.3f}",
                f"{ratio:.3f}",
                f"{paired:.3f}",
            )
        )
    print("\n".join(markdown_table(rows, left=2)))
    print()
    print(
        "ratio to plain = median ev/s / plain's median ev/s on the same topic; paired ratio = "
        "median over rounds of the same round's ratio"
    )


def versions() -> str:
    names = ("aiokafka", "psycopg", "psycopg-pool", "SQLAlchemy")
    found = []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{name} {metadata.version(name)}")
    return f"Python {platform.python_version()}, " + ", ".join(found)


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=20_000, help="per topic (default 20000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--partitions",
        default="1,6",
        help="comma-separated partition counts, one topic each (default 1,6)",
    )
    p.add_argument(
        "--sqlalchemy",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also measure consumer_lib with SqlAlchemyAsync (default off)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = p.parse_args(argv)
    if not args.database_url or not args.bootstrap:
        p.error(
            "DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS must be set: "
            'eval "$(.venv/bin/python scripts/services.py env)"'
        )
    if args.events < 1 or args.rounds < 1:
        p.error("--events and --rounds must be at least 1")
    try:
        args.partition_counts = [int(x) for x in args.partitions.split(",")]
    except ValueError:
        p.error("--partitions: comma-separated integers")
    if any(n < 1 for n in args.partition_counts):
        p.error("--partitions: at least 1 each")
    return args


async def run(args: argparse.Namespace) -> int:
    parsed = DatabaseUrl.parse(args.database_url)
    if parsed.dialect != "postgres":
        print("consumer_throughput: DATABASE_URL must be a Postgres URL", file=sys.stderr)
        return 2
    server_url = parsed.url
    dbname = f"bench_{uuid.uuid4().hex[:12]}"
    url = with_database(server_url, dbname)
    prefix = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    version = server_version(server_url)
    admin(server_url, "bench_database_create", dbname)
    topics: dict[int, str] = {}
    groups: list[str] = []
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SQL["applied_orders_create_table"])
        topics, payload_bytes = await fill_topics(
            args.bootstrap, prefix, args.partition_counts, args.events, args.seed
        )
        print(f"server:   {version}")
        print(f"client:   {versions()}; {os.cpu_count()} CPUs; {platform.platform()}")
        print(
            f"workload: {args.rounds} rounds x {args.events} events per contender and topic "
            f"(partitions {args.partition_counts}), {DISTINCT_KEYS} keys, payload "
            f"{payload_bytes} B JSON, database {dbname}",
            flush=True,
        )
        all_variants = variants(args.sqlalchemy)
        rates: dict[tuple[int, str], list[float]] = {}
        for rnd in range(args.rounds):
            for partitions, topic in topics.items():
                chosen = [v for v in all_variants if partitions > 1 or not v.multi_partition_only]
                shift = rnd % len(chosen)
                line = []
                for v in chosen[shift:] + chosen[:shift]:
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute(SQL["applied_orders_reset"])
                    group = f"{prefix}-{len(groups)}"
                    groups.append(group)
                    target = Target(args.bootstrap, topic, group, url, args.events, args.timeout)
                    rate = await v.run(target)
                    with psycopg.connect(url, autocommit=True) as conn:
                        row = conn.execute(SQL["applied_orders_count"]).fetchone()
                    if row is None or int(row[0]) != args.events:
                        raise AssertionError(f"{v.name}: {row} rows applied, not {args.events}")
                    rates.setdefault((partitions, v.name), []).append(rate)
                    line.append(f"{v.name} {rate:.0f}")
                print(
                    f"round {rnd + 1}/{args.rounds}, {partitions} partition(s): "
                    + ", ".join(line)
                    + " ev/s",
                    flush=True,
                )
    finally:
        if topics:
            try:
                await drop_topics(args.bootstrap, list(topics.values()))
            except Exception as exc:
                print(f"consumer_throughput: cleanup: {exc}", file=sys.stderr)
        admin(server_url, "bench_database_drop", dbname)

    if DISTURBED:
        print("\nDISTURBED runs (rerun for clean numbers):\n  " + "\n  ".join(DISTURBED))
    results = [Result(p, name, r) for (p, name), r in rates.items()]
    results.sort(key=lambda r: r.partitions)
    print()
    print_table(results)
    print()
    for partitions in args.partition_counts:
        lib = next(r for r in results if r.partitions == partitions and r.name == LIB)
        base = next(r for r in results if r.partitions == partitions and r.name == BASELINE)
        print(
            f"{partitions} partition(s): consumer_lib with dedup applies "
            f"{lib.median / base.median:.2f}x the events/s of the plain consumer without dedup"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        print("consumer_throughput: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"consumer_throughput: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
