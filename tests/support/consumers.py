"""consumer_lib in tests: records as the relay publishes them, handlers that write an effect
row, consumers in-process or as `python -m consumer_lib.cli run` subprocesses, and what the
database and the group's committed offsets say afterwards.

The business write of every handler is one row in consumer_effects (tests/support/sql/
consumer_<dialect>.sql), which has no unique constraint: an event applied twice shows as
two rows. Every wait here is bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from cloudevents.core.v1.event import CloudEvent

from consumer_lib import (
    ConsumedEvent,
    Consumer,
    ConsumerApp,
    ConsumerSettings,
    Database,
    PsycopgAsync,
    SqlAlchemyAsync,
    SqlAlchemySync,
)
from consumer_lib.database import Handler
from outbox_core.kafka_security import KafkaSecurity
from outbox_core.queries import Dialect, in_parameter_style, parse_blocks, to_numbered
from tests.support import mariadb
from tests.support.db import Backend, mariadb_backend, postgres_backend, sqlite_backend
from tests.support.kafka import Record, create_topics, delete_topics, read_topic, unique_topic_name
from tests.support.processes import ChildProcess
from tests.support.waits import until

_SQL = Path(__file__).parent / "sql"
_SHARED_SQL = (_SQL / "consumer_shared.sql").read_text()
CONSUMER_SQL: dict[Dialect, dict[str, str]] = {
    d: parse_blocks(
        (_SQL / f"consumer_{d}.sql").read_text(),
        f"consumer_{d}.sql",
        shared=in_parameter_style(_SHARED_SQL, d),
    )
    for d in ("postgres", "sqlite", "mariadb")
}
APP = "tests.support.consumer_app:build"
# What consumer_lib logs once it holds at least one partition.
ASSIGNED = 'partitions assigned partitions=["TopicPartition'

# sqlalchemy_async / sqlalchemy_sync run on the dialect's default driver (psycopg 3,
# aiosqlite, sqlite3; aiomysql and PyMySQL on MariaDB); sqlalchemy_asyncpg and
# sqlalchemy_psycopg2 are the same adapters on those Postgres drivers, sqlalchemy_mysqldb
# SqlAlchemySync on MariaDB's mysqlclient (not in ADAPTERS, which every database runs).
Adapter = Literal[
    "sqlalchemy_async",
    "sqlalchemy_sync",
    "psycopg_async",
    "sqlalchemy_asyncpg",
    "sqlalchemy_psycopg2",
    "sqlalchemy_mysqldb",
]
ADAPTERS: tuple[Adapter, ...] = (
    "sqlalchemy_async",
    "sqlalchemy_sync",
    "psycopg_async",
    "sqlalchemy_asyncpg",
    "sqlalchemy_psycopg2",
)
SYNC_ADAPTERS = ("sqlalchemy_sync", "sqlalchemy_psycopg2", "sqlalchemy_mysqldb")
SQLALCHEMY_ASYNC_ADAPTERS = ("sqlalchemy_async", "sqlalchemy_asyncpg")
_SCHEMES = {
    "sqlalchemy_asyncpg": "postgresql+asyncpg://",
    "sqlalchemy_psycopg2": "postgresql+psycopg2://",
}
Hook = Callable[[ConsumedEvent], None]


# --------------------------------------------------------------------------- database


def consumer_sql(dialect: Dialect, name: str) -> str:
    return CONSUMER_SQL[dialect][name]


def prepare(backend: Backend) -> Backend:
    """Migrate (processed_events comes with producer_lib's schema) and add consumer_effects."""
    backend.migrate()
    return with_effects(backend)


def with_effects(backend: Backend) -> Backend:
    """A migrated database plus consumer_effects, the table the test handlers write."""
    backend.run(consumer_sql(backend.dialect, "effects_create"))
    return backend


def private_backend(request: pytest.FixtureRequest, dialect: str, folder: Path) -> Backend:
    """A database of the test's own on the dialect, migrated, with consumer_effects (from
    the fixtures of tests/conftest.py; SQLite: a file in `folder`)."""
    if dialect == "postgres":
        return with_effects(postgres_backend(request.getfixturevalue("migrated_pg_url")))
    if dialect == "mariadb":
        return prepare(mariadb_backend(request.getfixturevalue("mariadb_url")))
    return prepare(sqlite_backend(folder / "consumer.sqlite3"))


def backend_from(dialect: str, target: str) -> Backend:
    if dialect == "postgres":
        return postgres_backend(target)
    if dialect == "mariadb":
        return mariadb_backend(target)
    return sqlite_backend(Path(target))


def make_database(adapter: str, backend: Backend) -> Database:
    """consumer_lib's Database of one kind on the backend; created inside the running loop."""
    if adapter == "psycopg_async":
        if backend.dialect != "postgres":
            raise ValueError("PsycopgAsync is Postgres only")
        return PsycopgAsync(backend.target, max_connections=8)
    if adapter in _SCHEMES and backend.dialect != "postgres":
        raise ValueError(f"{adapter} is Postgres only")
    if adapter == "sqlalchemy_mysqldb" and backend.dialect != "mariadb":
        raise ValueError(f"{adapter} is MariaDB only")
    url = (
        backend.target.replace("postgresql://", _SCHEMES[adapter], 1)
        if adapter in _SCHEMES
        else mariadb.sqlalchemy_url(backend.target, "mysqldb")
        if adapter == "sqlalchemy_mysqldb"
        else backend.sqlalchemy_url
    )
    if adapter in SQLALCHEMY_ASYNC_ADAPTERS:
        from sqlalchemy.ext.asyncio import create_async_engine

        if backend.dialect == "sqlite":
            url = f"sqlite+aiosqlite:///{backend.target}"
        elif backend.dialect == "mariadb":
            url = backend.async_sqlalchemy_url
        return SqlAlchemyAsync(create_async_engine(url))
    if adapter in SYNC_ADAPTERS:
        from sqlalchemy import create_engine

        return SqlAlchemySync(create_engine(url))
    raise ValueError(f"unknown adapter {adapter!r}")


async def exec_driver_sql_async(conn: Any, sql: str, params: Any) -> None:
    """conn.exec_driver_sql on an AsyncConnection; asyncpg takes `$n` and tuples."""
    if conn.dialect.driver == "asyncpg":
        numbered = to_numbered(sql)
        if isinstance(params, list):
            params = [tuple(p[n] for n in numbered.names) for p in params]
        else:
            params = tuple(params[n] for n in numbered.names)
        sql = numbered.sql
    await conn.exec_driver_sql(sql, params)


def effect_params(event: ConsumedEvent, group: str, applied_by: str) -> dict[str, Any]:
    payload = event.payload
    n = payload.get("n") if isinstance(payload, dict) else None
    return {
        "consumer_group": group,
        "event_id": None if event.event_id is None else str(event.event_id),
        "event_key": event.key,
        "event_type": event.event_type,
        "topic": event.topic,
        "kafka_partition": event.partition,
        "kafka_offset": event.offset,
        "n": n,
        "applied_by": applied_by,
    }


def effect_handler(
    adapter: str,
    dialect: Dialect,
    group: str,
    *,
    applied_by: str = "test",
    delay_s: float = 0.0,
    before_write: Hook | None = None,
    after_write: Hook | None = None,
    calls: list[ConsumedEvent] | None = None,
) -> Handler:
    """A handler writing one consumer_effects row through the session consumer_lib gives it.

    before_write / after_write run inside the transaction (raise to make it roll back);
    calls, when given, collects every invocation (the handler may run more than once).
    """
    sql = consumer_sql(dialect, "effect_insert")

    def hooks_before(event: ConsumedEvent) -> None:
        if calls is not None:
            calls.append(event)
        if before_write is not None:
            before_write(event)

    if adapter in SYNC_ADAPTERS:
        from sqlalchemy.orm import Session

        def sync_handler(event: ConsumedEvent, session: Session) -> None:
            assert isinstance(session, Session), type(session)
            assert session.in_transaction()
            hooks_before(event)
            if delay_s:
                time.sleep(delay_s)
            session.connection().exec_driver_sql(sql, effect_params(event, group, applied_by))
            if after_write is not None:
                after_write(event)

        return sync_handler

    if adapter in SQLALCHEMY_ASYNC_ADAPTERS:
        from sqlalchemy.ext.asyncio import AsyncSession

        async def sa_handler(event: ConsumedEvent, session: AsyncSession) -> None:
            assert isinstance(session, AsyncSession), type(session)
            assert session.in_transaction()
            hooks_before(event)
            if delay_s:
                await asyncio.sleep(delay_s)
            conn = await session.connection()
            await exec_driver_sql_async(conn, sql, effect_params(event, group, applied_by))
            if after_write is not None:
                after_write(event)

        return sa_handler

    if adapter == "psycopg_async":
        import psycopg

        async def pg_handler(event: ConsumedEvent, conn: psycopg.AsyncConnection[Any]) -> None:
            assert isinstance(conn, psycopg.AsyncConnection), type(conn)
            hooks_before(event)
            if delay_s:
                await asyncio.sleep(delay_s)
            await conn.execute(sql, effect_params(event, group, applied_by))
            if after_write is not None:
                after_write(event)

        return pg_handler

    raise ValueError(f"unknown adapter {adapter!r}")


def bulk_effect_handler(
    adapter: str, dialect: Dialect, group: str, *, calls: list[list[ConsumedEvent]]
) -> Handler:
    """An on_batch handler: one consumer_effects row per event, written in one executemany;
    calls collects the list of events of every invocation."""
    sql = consumer_sql(dialect, "effect_insert")

    def rows(events: list[ConsumedEvent]) -> list[dict[str, Any]]:
        calls.append(events)
        return [effect_params(event, group, "bulk") for event in events]

    if adapter in SYNC_ADAPTERS:

        def sync_bulk(events: list[ConsumedEvent], session: Any) -> None:
            session.connection().exec_driver_sql(sql, rows(events))

        return sync_bulk

    if adapter in SQLALCHEMY_ASYNC_ADAPTERS:

        async def sa_bulk(events: list[ConsumedEvent], session: Any) -> None:
            await exec_driver_sql_async(await session.connection(), sql, rows(events))

        return sa_bulk

    async def pg_bulk(events: list[ConsumedEvent], conn: Any) -> None:
        async with conn.cursor() as cur:
            await cur.executemany(sql, rows(events))

    return pg_bulk


@dataclass(frozen=True)
class Effect:
    group: str
    event_id: str | None
    key: str | None
    event_type: str | None
    topic: str
    partition: int
    offset: int
    n: int | None
    applied_by: str
    id: int


def _fetch(backend: Backend, name: str, params: dict[str, Any] | None = None) -> list[Any]:
    return backend.run(consumer_sql(backend.dialect, name), params)


def effects(backend: Backend, *, before: Any = None) -> list[Effect]:
    """Every effect row in write order; with before (a datetime), only rows written earlier."""
    if before is None:
        rows = _fetch(backend, "effects_all")
    else:
        rows = _fetch(backend, "effects_applied_before", {"before": before})
    return [
        Effect(
            str(g), e, k, t, str(tp), int(p), int(o), None if n is None else int(n), str(a), int(i)
        )
        for g, e, k, t, tp, p, o, n, a, i in rows
    ]


def processed_ids(backend: Backend, group: str) -> set[str]:
    return {str(r[0]) for r in _fetch(backend, "processed_event_ids", {"consumer_group": group})}


def backdate_processed(backend: Backend, group: str, seconds: float) -> None:
    """The group's processed_events rows, made `seconds` older."""
    backend.run(
        consumer_sql(backend.dialect, "processed_event_backdate"),
        {"consumer_group": group, "seconds": seconds},
    )


@dataclass(frozen=True)
class KeptDeadLetter:
    """A consumer_dead_letters row: a record the dead-letter topic refused for good."""

    group: str
    topic: str
    partition: int
    offset: str
    value_bytes: int | None
    error_type: str
    error: str
    refused: str
    headers: list[list[str]]


def kept_dead_letters(backend: Backend) -> list[KeptDeadLetter]:
    return [
        KeptDeadLetter(
            str(g), str(t), int(p), str(o), None if n is None else int(n), et, e, r, json.loads(h)
        )
        for g, t, p, o, n, et, e, r, h in _fetch(backend, "dead_letters_kept")
    ]


def dedup_transactions(backend: Backend, group: str) -> int:
    """How many transactions (on SQLite: at most) recorded the group's processed_events."""
    return int(_fetch(backend, "processed_event_transactions", {"consumer_group": group})[0][0])


def terminate_other_connections(backend: Backend) -> int:
    """Postgres only: cut every other client connection to the backend's database."""
    return int(_fetch(backend, "backends_terminate")[0][0])


def effect_problems(found: Sequence[Effect], expected: Iterable[str], group: str) -> list[str]:
    """Exactly one effect per expected event_id of the group, and nothing else."""
    want = set(expected)
    counts = Counter(e.event_id for e in found if e.group == group)
    problems: list[str] = []
    twice = {e: c for e, c in counts.items() if c > 1}
    if twice:
        problems.append(f"{len(twice)} events applied more than once, e.g. {list(twice)[:3]}")
    missing = want - set(counts)
    if missing:
        problems.append(f"{len(missing)} events never applied, e.g. {sorted(missing)[:3]}")
    extra = {e for e in counts if e not in want}
    if extra:
        problems.append(f"{len(extra)} unexpected events applied, e.g. {list(extra)[:3]}")
    return problems


def order_problems(found: Sequence[Effect]) -> list[str]:
    """Within a partition, effects were written in offset order (first applications)."""
    last: dict[tuple[str, str, int], int] = {}
    problems: list[str] = []
    for e in found:
        where = (e.group, e.topic, e.partition)
        if e.offset <= last.get(where, -1):
            problems.append(f"{where}: offset {e.offset} applied after {last[where]}")
        last[where] = max(e.offset, last.get(where, -1))
    return problems


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Outgoing:
    """One record to put on a topic; event_id None for records without that header."""

    key: str | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    partition: int | None = None
    event_id: str | None = None


def relay_record(
    event_id: str,
    key: str,
    payload: Any,
    *,
    event_type: str = "OrderPlaced",
    partition: int | None = None,
) -> Outgoing:
    """What the relay publishes for an outbox row: event_id, event_type, content-type."""
    return Outgoing(
        key=key,
        value=json.dumps(payload, separators=(",", ":")).encode(),
        headers=(
            ("event_id", event_id.encode()),
            ("event_type", event_type.encode()),
            ("content-type", b"application/json"),
        ),
        partition=partition,
        event_id=event_id,
    )


CE_SOURCE = "/orders-service"
CE_TIME = dt.datetime(2026, 12, 5, 9, 0, 0, 123456, tzinfo=dt.UTC)


def cloud_event(event_id: str, data: Any, **attributes: Any) -> CloudEvent:
    """A CloudEvent as another producer makes it with the cloudevents SDK: an OrderPlaced
    of CE_SOURCE at CE_TIME unless the attributes say otherwise."""
    base = {"id": event_id, "source": CE_SOURCE, "type": "OrderPlaced", "time": CE_TIME}
    return CloudEvent(attributes={**base, **attributes}, data=data)


def make_events(
    n: int, *, keys: int = 50, partitions: int = 1, seed: int = 0, start: int = 0
) -> list[Outgoing]:
    """n relay-style events over `keys` keys; a key always lands on the same partition."""
    rng = random.Random(seed)
    out: list[Outgoing] = []
    for i in range(start, start + n):
        k = rng.randrange(keys)
        payload = {"n": i, "key": f"key-{k}", "amount_cents": rng.randint(100, 20_000)}
        out.append(
            relay_record(
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                f"key-{k}",
                payload,
                partition=k % partitions,
            )
        )
    return out


def with_duplicates(
    records: Sequence[Outgoing],
    count: int,
    *,
    seed: int = 0,
    partitions: int = 1,
    cross_partition: int = 0,
) -> list[Outgoing]:
    """The records plus `count` copies of random ones, each placed after its original.

    Copies keep the key and partition (a relay publishing a row twice), except
    `cross_partition` of them, which go to the next partition (so two partitions race).
    """
    rng = random.Random(seed)
    out = list(records)
    for i, original in enumerate(rng.sample(list(records), count)):
        copy = original
        if i < cross_partition and partitions > 1 and original.partition is not None:
            copy = Outgoing(
                original.key,
                original.value,
                original.headers,
                (original.partition + 1) % partitions,
                original.event_id,
            )
        at = out.index(original)
        out.insert(rng.randint(at + 1, len(out)), copy)
    return out


@dataclass
class Layout:
    """Where each produced record landed: partition -> offset -> event_id (or None)."""

    topic: str
    at: dict[int, dict[int, str | None]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, partition: int, offset: int, event_id: str | None) -> None:
        self.at[partition][offset] = event_id

    @property
    def event_ids(self) -> set[str]:
        return {e for offs in self.at.values() for e in offs.values() if e is not None}

    @property
    def records(self) -> int:
        return sum(len(v) for v in self.at.values())

    def ends(self) -> dict[int, int]:
        return {p: max(offs) + 1 for p, offs in self.at.items() if offs}


async def produce(
    bootstrap: str, topic: str, records: Sequence[Outgoing], layout: Layout | None = None
) -> Layout:
    """Sends the records in order (idempotent producer, acks=all); returns where they landed."""
    layout = layout or Layout(topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                r.value,
                key=None if r.key is None else r.key.encode(),
                headers=list(r.headers),
                partition=r.partition,
            )
            for r in records
        ]
        for record, fut in zip(records, futures, strict=True):
            meta = await fut
            layout.add(meta.partition, meta.offset, record.event_id)
    finally:
        await producer.stop()
    return layout


class ChunkGate:
    """How many of a feed's chunks may go out yet; a scenario opens it as its steps happen.

    A feed on a clock can run dry before a slow machine reaches a scenario's last steps;
    gated, each step has records of its own to consume.
    """

    def __init__(self, opened: int) -> None:
        self._opened = opened
        self._changed = asyncio.Condition()

    async def open_to(self, chunks: int) -> None:
        async with self._changed:
            self._opened = max(self._opened, chunks)
            self._changed.notify_all()

    async def wait_open(self, index: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: index < self._opened)


async def feed(
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    layout: Layout,
    *,
    chunk: int = 100,
    pause_s: float = 0.5,
    gate: ChunkGate | None = None,
) -> Layout:
    """Produces the records chunk by chunk with a pause between chunks (run it as a task)."""
    for index, start in enumerate(range(0, len(records), chunk)):
        if gate is not None:
            await gate.wait_open(index)
        await produce(bootstrap, topic, records[start : start + chunk], layout)
        if start + chunk < len(records):
            await asyncio.sleep(pause_s)
    return layout


# --------------------------------------------------------------------------- Kafka read-backs


class GroupOffsets:
    """The group's committed offsets for one topic, read with one admin client."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)

    async def __aenter__(self) -> GroupOffsets:
        await self._admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._admin.close()

    async def read(self) -> dict[int, int]:
        found = await self._admin.list_consumer_group_offsets(self.group)
        return {
            tp.partition: int(meta.offset)
            for tp, meta in found.items()
            if tp.topic == self.topic and meta.offset >= 0
        }


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    async with GroupOffsets(bootstrap, group, topic) as offsets:
        return await offsets.read()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return {tp.partition: int(o) for tp, o in ends.items()}
    finally:
        await consumer.stop()


def offset_problems(
    committed: dict[int, int],
    layout: Layout,
    applied: set[str],
    done_without_effect: Iterable[tuple[int, int]] = (),
) -> list[str]:
    """A committed offset C is honest when every record below C had its effect committed
    (or is one that is done without one: dead-lettered or skipped)."""
    done = set(done_without_effect)
    problems: list[str] = []
    for partition, offset in sorted(committed.items()):
        for below in range(offset):
            if (partition, below) in done:
                continue
            event_id = layout.at[partition].get(below)
            if event_id is None or event_id not in applied:
                problems.append(
                    f"partition {partition}: offset {offset} committed but the record at "
                    f"{below} (event {event_id}) has no committed effect"
                )
                break
    return problems


async def drop_topics_with_dead_letters(bootstrap: str, topics: Iterable[str]) -> None:
    names = [n for t in topics for n in (t, f"{t}.DLT")]
    await delete_topics(bootstrap, names)


def new_group() -> str:
    """A consumer group of its own for one test."""
    return f"g-{uuid.uuid4().hex[:10]}"


@contextlib.asynccontextmanager
async def consumer_topics(bootstrap: str) -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """make(prefix, partitions) creates a private topic; each one and the dead-letter topic a
    consumer created for it are deleted on exit."""
    made: list[str] = []

    async def make(prefix: str = "c", partitions: int = 1) -> str:
        name = unique_topic_name(prefix)
        await create_topics(bootstrap, [name], partitions)
        made.append(name)
        return name

    try:
        yield make
    finally:
        if made:
            await drop_topics_with_dead_letters(bootstrap, made)


# --------------------------------------------------------------------------- waiting


# --------------------------------------------------------------------------- in-process


class RunningConsumer:
    """Consumer.run() as a task of this loop; stop() then awaits it (bounded)."""

    def __init__(self, app: ConsumerApp) -> None:
        self.consumer = Consumer(app)
        self.task: asyncio.Task[None] | None = None

    @property
    def stats(self) -> Any:
        return self.consumer.stats

    def check_alive(self) -> None:
        if self.task is not None and self.task.done():
            exc = self.task.exception()
            raise AssertionError(f"the consumer stopped by itself: {exc!r}") from exc

    async def stop(self, timeout: float = 60) -> None:
        self.consumer.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, timeout)


@contextlib.asynccontextmanager
async def running_consumer(app: ConsumerApp) -> AsyncIterator[RunningConsumer]:
    running = RunningConsumer(app)
    running.task = asyncio.create_task(running.consumer.run(), name="consumer")
    try:
        yield running
    finally:
        await running.stop()


# --------------------------------------------------------------------------- subprocesses


def consumer_env(
    backend: Backend,
    bootstrap: str,
    *,
    topics: Sequence[str],
    group: str,
    name: str,
    adapter: str = "psycopg_async",
    **extra: Any,
) -> dict[str, str]:
    """Environment for tests.support.consumer_app (see that module for every variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSUMER_TEST_")}
    values: dict[str, Any] = {
        "dialect": backend.dialect,
        "database": backend.target,
        "bootstrap": bootstrap,
        "topics": ",".join(topics),
        "group": group,
        "name": name,
        "adapter": adapter,
        **extra,
    }
    for key, value in values.items():
        if value is not None:
            env[f"CONSUMER_TEST_{key.upper()}"] = str(value)
    return env


class ConsumerProcess(ChildProcess):
    """`python -m consumer_lib.cli run tests.support.consumer_app:build` as a child process."""

    def __init__(self, env: dict[str, str], log_path: Path, app: str = APP, name: str = "") -> None:
        super().__init__(["-m", "consumer_lib.cli", "run", app], env, log_path, name)

    async def wait_log(self, text: str, timeout: float = 60) -> None:
        """Until the log contains text; fails early when the process exits."""

        async def seen() -> bool:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"consumer {self.name} exited {self.proc.returncode} before logging "
                    f"{text!r}:\n{self.log()[-3000:]}"
                )
            return False

        await until(seen, timeout, f"{text!r} in the log of consumer {self.name}", interval=0.05)


class ConsumerFleet:
    """The consumer subprocesses of one test; whatever still runs at teardown is killed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[ConsumerProcess] = []

    def start(self, env: dict[str, str], name: str) -> ConsumerProcess:
        proc = ConsumerProcess(env, self.folder / f"consumer-{name}.log", name=name)
        self.procs.append(proc)
        return proc

    def running(self) -> list[ConsumerProcess]:
        return [p for p in self.procs if p.running]

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"=== {p.name}\n{p.log()[-tail:]}" for p in self.procs)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.running:
                with contextlib.suppress(Exception):
                    proc.kill()


# --------------------------------------------------------------------------- in-process tests


def fast_settings(bootstrap: str, group: str, **over: Any) -> ConsumerSettings:
    """Settings for a test: plaintext Kafka, short backoff, three attempts."""
    fast: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.2, "max_attempts": 3}
    return ConsumerSettings(
        security=KafkaSecurity.plaintext(),
        bootstrap_servers=bootstrap,
        group_id=group,
        **{**fast, **over},
    )


async def wait_committed(
    bootstrap: str,
    group: str,
    layout: Layout,
    timeout: float = 60,
    alive: Callable[[], None] | None = None,
) -> None:
    """Until the group's committed offsets reach the end of every partition written to."""
    want = layout.ends()

    async def reached() -> bool:
        got = await committed_offsets(bootstrap, group, layout.topic)
        return all(got.get(p, 0) >= end for p, end in want.items())

    await until(reached, timeout, f"offsets {want} committed by {group}", alive=alive)


async def dead_letters(bootstrap: str, topic: str) -> list[Record]:
    """What the consumer put on the topic's dead-letter topic."""
    return await read_topic(bootstrap, f"{topic}.DLT", timeout=30)


def header(record: Record, name: str) -> str:
    """A header of the record that must be there, as text."""
    raw = record.header(name)
    assert raw is not None, f"no {name} header in {record.headers}"
    return raw.decode()
