"""The cheapest publish loop these drivers allow, as a floor for the relay's steady CPU.

Not a relay: one asyncpg statement a cycle deletes pending rows and returns them
(bench/sql/steady_floor.sql), one aiokafka produce request per cycle carries them (a
record batch per partition, acks=all, idempotent, as the relay's producer), then the loop
sleeps --gather-s. No leases, no settle, no floors, no metrics, no ordering beyond the
batch: whatever the relay does beyond this loop is what its design adds.

bench/relay_fleet.py runs it with --floor-gathers beside the relay, in the same run:

    .venv/bin/python -m bench.steady_floor --gather-s 0.01   # reads OUTBOX_DATABASE_URL,
        # OUTBOX_KAFKA_BOOTSTRAP_SERVERS and OUTBOX_TOPIC_PREFIX, as the relay
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
from aiokafka import AIOKafkaProducer  # noqa: E402
from aiokafka.partitioner import DefaultPartitioner  # noqa: E402

from bench.database import load_sql  # noqa: E402

Q = load_sql("steady_floor.sql")
PARTITIONER = DefaultPartitioner()
PARTITIONS: dict[str, list[int]] = {}  # topic -> its partitions, looked up once


async def cycle(conn: Any, producer: AIOKafkaProducer, prefix: str, limit: int) -> int:
    rows = await conn.fetch(Q["floor_take"], limit)
    if not rows:
        return 0
    batches: dict[tuple[str, int], Any] = {}
    sent: list[asyncio.Future[Any]] = []
    for topic, key, payload in rows:
        name = prefix + topic
        parts = PARTITIONS.get(name)
        if parts is None:
            parts = PARTITIONS[name] = sorted(await producer.partitions_for(name))
        k = key.encode()
        partition = PARTITIONER(k, parts, parts)
        batch = batches.get((name, partition))
        if batch is None:
            batch = batches[(name, partition)] = producer.create_batch()
        if batch.append(key=k, value=bytes(payload), timestamp=None) is None:
            sent.append(await producer.send_batch(batch, name, partition=partition))
            batch = batches[(name, partition)] = producer.create_batch()
            batch.append(key=k, value=bytes(payload), timestamp=None)
    for (topic, partition), batch in batches.items():
        sent.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*sent)
    return len(rows)


async def run(args: argparse.Namespace) -> int:
    conn = await asyncpg.connect(os.environ["OUTBOX_DATABASE_URL"])
    producer = AIOKafkaProducer(
        bootstrap_servers=os.environ["OUTBOX_KAFKA_BOOTSTRAP_SERVERS"],
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
        max_request_size=int(os.environ.get("OUTBOX_KAFKA_MAX_REQUEST_SIZE", "1048576")),
    )
    await producer.start()
    prefix = os.environ.get("OUTBOX_TOPIC_PREFIX", "")
    cycles = rows = 0
    try:
        while True:
            got = await cycle(conn, producer, prefix, args.limit)
            cycles, rows = cycles + 1, rows + got
            if cycles % 1000 == 0:
                print(f"{cycles} cycles, {rows} rows", flush=True)
            await asyncio.sleep(args.gather_s)
    finally:
        await producer.stop()
        await conn.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--gather-s", type=float, default=0.01, help="sleep after every cycle")
    p.add_argument("--limit", type=int, default=500, help="rows a cycle takes at most")
    # bench/large_events.py passes the rows the relay's byte budget would claim.
    args = p.parse_args(argv)
    if args.gather_s < 0 or args.limit < 1:
        p.error("--gather-s must be >= 0 and --limit >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
