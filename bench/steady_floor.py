"""The cheapest publish loop these drivers allow, as a floor for the relay's steady CPU.

Not a relay: one asyncpg statement a cycle deletes pending rows and returns them
(bench/sql/steady_floor.sql), one aiokafka produce request per cycle carries them (a
record batch per partition, acks=all, idempotent, as the relay's producer), then the loop
sleeps --gather-s (not after a cycle that took --limit rows: a backlog is drained
without pauses, as the relay does). No leases, no settle, no floors, no metrics, no ordering beyond the
batch: whatever the relay does beyond this loop is what its design adds.

That loop loses the rows of a cycle it crashes in. With --settle it loses nothing: it
reads the rows, sends them, then deletes them, a second statement a cycle, the fewest an
at-least-once relay needs (still no leases, fencing or retries).

With --transactions the producer is transactional (its id OUTBOX_KAFKA_TRANSACTIONAL_ID_PREFIX
plus "-floor", or a random one) and each cycle's sends are one Kafka transaction: begun,
sent, committed before the loop sleeps (the relay's kafka_transactions without its
progress record and its fencing). bench/relay_transactions.py measures both beside the
relay's commit-to-visible latency.

On a MariaDB outbox (a mysql:// OUTBOX_DATABASE_URL) the same loop runs on aiomysql, the
relay's driver there, with the statements of bench/sql/steady_floor_mariadb.sql, each in
a transaction of its own (autocommit). bench relay_compare's contenders floor and
floor-mariadb run it beside the relay on both databases.

bench/relay_fleet.py runs it with --floor-gathers beside the relay, in the same run:

    .venv/bin/python -m bench steady_floor --gather-s 0.01   # reads OUTBOX_DATABASE_URL,
        # OUTBOX_KAFKA_BOOTSTRAP_SERVERS and OUTBOX_TOPIC_PREFIX, as the relay
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer import sender as aiokafka_sender

from bench.shared.cli import parser
from bench.shared.database import load_sql
from outbox_core.database_url import DatabaseUrl, MariadbTarget
from outbox_core.queries import query

PARTITIONER = DefaultPartitioner()


Record = tuple[str, bytes, bytes]  # topic, key, value


class AiokafkaSender:
    """The relay's client: one record batch per partition, submitted at once; with a
    transactional_id, each send() one transaction (create_batch() then flags the batches
    transactional, and send_batch adds their partitions to the transaction)."""

    def __init__(
        self, bootstrap: str, max_request_size: int, transactional_id: str | None = None
    ) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            max_request_size=max_request_size,
            transactional_id=transactional_id,
        )
        self.transactional = transactional_id is not None
        if self.transactional:
            # As the relay does (relay/transport/aiokafka_adapter.py): a transaction begun
            # right after a commit asks for its partitions again after 2 ms, not aiokafka's
            # 20, when the coordinator is still writing the previous commit's markers.
            aiokafka_sender.BACKOFF_OVERRIDE = 0.002
        self.partitions: dict[str, list[int]] = {}  # topic -> its partitions, looked up once

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def send(self, records: list[Record]) -> None:
        if not self.transactional:
            await self._send(records)
            return
        await self.producer.begin_transaction()
        try:
            await self._send(records)
        except Exception:
            await self.producer.abort_transaction()
            raise
        await self.producer.commit_transaction()

    async def _send(self, records: list[Record]) -> None:
        producer = self.producer
        batches: dict[tuple[str, int], Any] = {}
        sent: list[asyncio.Future[Any]] = []
        for topic, key, value in records:
            parts = self.partitions.get(topic)
            if parts is None:
                parts = self.partitions[topic] = sorted(await producer.partitions_for(topic))
            partition = PARTITIONER(key, parts, parts)
            batch = batches.get((topic, partition))
            if batch is None:
                batch = batches[(topic, partition)] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                sent.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[(topic, partition)] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for (topic, partition), batch in batches.items():
            sent.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*sent)


class LibrdkafkaSender:
    """confluent-kafka (librdkafka, in C, with threads of its own): a thread serves its
    delivery reports and wakes the loop once a cycle's last record is acked."""

    def __init__(self, bootstrap: str, max_request_size: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.max.bytes": max_request_size,
            }
        )
        self.stopping = threading.Event()
        self.poller = threading.Thread(target=self._poll, name="delivery-reports", daemon=True)

    def _poll(self) -> None:
        while not self.stopping.is_set():
            self.producer.poll(0.1)

    async def start(self) -> None:
        self.poller.start()

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.to_thread(self.poller.join)
        await asyncio.to_thread(self.producer.flush, 10)

    async def send(self, records: list[Record]) -> None:
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[None] = loop.create_future()
        left = len(records)
        failed: list[object] = []

        def report(err: object, _msg: object) -> None:  # on the poller's thread
            nonlocal left
            if err is not None:
                failed.append(err)
            left -= 1
            if left == 0:
                loop.call_soon_threadsafe(acked.set_result, None)

        for topic, key, value in records:
            self.producer.produce(topic, value, key, on_delivery=report)
        await acked
        if failed:
            raise RuntimeError(f"{len(failed)} records not delivered: {failed[0]}")


class OutboxConnection(Protocol):
    """The outbox's two statements on one connection, whichever the database."""

    async def fetch(self, block: str, limit: int) -> Sequence[Sequence[Any]]: ...

    async def settle(self, ids: list[int]) -> None: ...

    async def close(self) -> None: ...


class PostgresOutbox:
    """asyncpg, bench/sql/steady_floor.sql."""

    statements = load_sql("steady_floor.sql")

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, block: str, limit: int) -> Sequence[Sequence[Any]]:
        rows: Sequence[Sequence[Any]] = await self.conn.fetch(self.statements[block], limit)
        return rows

    async def settle(self, ids: list[int]) -> None:
        await self.conn.execute(self.statements["floor_settle"], ids)

    async def close(self) -> None:
        await self.conn.close()


class MariadbOutbox:
    """aiomysql in autocommit, each statement its own transaction, the session set up as the
    relay's (UTC, READ COMMITTED), bench/sql/steady_floor_mariadb.sql."""

    statements = load_sql("steady_floor_mariadb.sql")

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, block: str, limit: int) -> Sequence[Sequence[Any]]:
        async with self.conn.cursor() as cur:
            await cur.execute(self.statements[block], (limit,))
            rows: Sequence[Sequence[Any]] = await cur.fetchall()
        return rows

    async def settle(self, ids: list[int]) -> None:
        async with self.conn.cursor() as cur:
            await cur.execute(self.statements["floor_settle"], (ids,))

    async def close(self) -> None:
        self.conn.close()


async def open_outbox(url: str) -> OutboxConnection:
    target = DatabaseUrl.parse(url)
    if target.dialect == "mariadb":
        import aiomysql

        login = MariadbTarget.parse(target.url)
        conn = await aiomysql.connect(
            **login.login(),
            db=login.database,
            autocommit=True,
            init_command=query("mariadb", "session_init"),
        )
        return MariadbOutbox(conn)
    return PostgresOutbox(await asyncpg.connect(url))


async def cycle(
    db: OutboxConnection,
    sender: AiokafkaSender | LibrdkafkaSender,
    prefix: str,
    limit: int,
    settle: bool = False,
) -> int:
    """settle (--settle): read, send, then delete what Kafka acked (two statements a
    cycle); otherwise delete, then send."""
    rows = await db.fetch("floor_read" if settle else "floor_take", limit)
    if rows:
        # Both statements end with topic, key, payload; floor_read starts with the id.
        await sender.send([(prefix + row[-3], row[-2].encode(), bytes(row[-1])) for row in rows])
        if settle:
            await db.settle([row[0] for row in rows])
    return len(rows)


async def run(args: argparse.Namespace) -> int:
    db = await open_outbox(os.environ["OUTBOX_DATABASE_URL"])
    bootstrap = os.environ["OUTBOX_KAFKA_BOOTSTRAP_SERVERS"]
    max_request_size = int(os.environ.get("OUTBOX_KAFKA_MAX_REQUEST_SIZE", "1048576"))
    sender: AiokafkaSender | LibrdkafkaSender
    if args.client == "librdkafka":
        sender = LibrdkafkaSender(bootstrap, max_request_size)
    else:
        sender = AiokafkaSender(
            bootstrap, max_request_size, transactional_id() if args.transactions else None
        )
    await sender.start()
    prefix = os.environ.get("OUTBOX_TOPIC_PREFIX", "")
    cycles = rows = 0
    try:
        while True:
            got = await cycle(db, sender, prefix, args.limit, args.settle)
            cycles, rows = cycles + 1, rows + got
            if cycles % 1000 == 0:
                print(f"{cycles} cycles, {rows} rows", flush=True)
            if got < args.limit:
                await asyncio.sleep(args.gather_s)
    finally:
        await sender.stop()
        await db.close()


def transactional_id() -> str:
    """The relay's prefix when the bench gives one (the broker's ACLs, if any, name it),
    else a random id: never another producer's, which the init would fence."""
    prefix = os.environ.get("OUTBOX_KAFKA_TRANSACTIONAL_ID_PREFIX")
    return f"{prefix}-floor" if prefix else f"steady-floor-{uuid.uuid4().hex[:12]}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--gather-s", type=float, default=0.01, help="sleep after every cycle")
    p.add_argument("--limit", type=int, default=500, help="rows a cycle takes at most")
    p.add_argument(
        "--client",
        choices=("aiokafka", "librdkafka"),
        default="aiokafka",
        help="the Kafka client: the relay's, or confluent-kafka (pip install confluent-kafka)",
    )
    p.add_argument(
        "--settle",
        action="store_true",
        help="at least once: read the rows, send them, then delete them (two statements a "
        "cycle) instead of deleting them before the send",
    )
    p.add_argument(
        "--transactions",
        action="store_true",
        help="each cycle's sends in one Kafka transaction (aiokafka only)",
    )
    # bench/large_events.py passes the rows the relay's byte budget would claim.
    args = p.parse_args(argv)
    if args.gather_s < 0 or args.limit < 1:
        p.error("--gather-s must be >= 0 and --limit >= 1")
    if args.transactions and args.client != "aiokafka":
        p.error("--transactions runs on the relay's client only: --client aiokafka")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))
