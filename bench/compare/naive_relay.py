"""The baseline of bench/relay_compare.py: the outbox relay people write by hand.

A polling loop: BEGIN; SELECT the oldest pending row FOR UPDATE SKIP LOCKED; await its
send to Kafka (acks=all, idempotent: the same delivery guarantees as the relay);
DELETE it; COMMIT. One row per transaction, one awaited send per event, one process.
Idle, it sleeps poll_interval_s between polls.

    .venv/bin/python -m bench.naive_relay --database-url URL --bootstrap HOST:PORT \
        [--topic-prefix P] [--poll-interval-s 0.05]

SIGTERM or SIGINT ends it after the row in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

import psycopg
from aiokafka import AIOKafkaProducer

from bench.shared.database import load_sql

SQL = load_sql("naive_relay.sql")


async def relay(url: str, bootstrap: str, prefix: str, poll_s: float, stop: asyncio.Event) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, client_id="naive-relay"
    )
    await producer.start()
    published = 0
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=False) as conn:
            while not stop.is_set():
                async with conn.transaction():
                    cur = await conn.execute(SQL["naive_claim_one"])
                    row: tuple[Any, ...] | None = await cur.fetchone()
                    if row is not None:
                        row_id, event_id, topic, key, event_type, payload, headers = row
                        await producer.send_and_wait(
                            prefix + topic,
                            value=bytes(payload),
                            key=key.encode(),
                            headers=[
                                ("event_id", event_id.encode()),
                                ("event_type", event_type.encode()),
                                *((k, str(v).encode()) for k, v in json.loads(headers).items()),
                            ],
                        )
                        await conn.execute(SQL["naive_delete"], {"id": row_id})
                        published += 1
                if row is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=poll_s)
    finally:
        await producer.stop()
    return published


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic-prefix", default="")
    p.add_argument("--poll-interval-s", type=float, default=0.05)
    args = p.parse_args(argv)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await relay(
            args.database_url, args.bootstrap, args.topic_prefix, args.poll_interval_s, stop
        )

    published = asyncio.run(run())
    print(f"naive relay: published {published}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
