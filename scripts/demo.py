"""The demo: orders and their events through producer_lib, the relay, and back from Kafka
(or, with --transport redis, from a Redis stream).

Writes N orders (one business row + one outbox event per order, committed together) to
SQLite (default) or Postgres (--postgres), runs the relay until the outbox is drained,
reads the topic (stream) back and prints what a consumer would see: delivered, missing,
duplicates, per-key order violations, and the relay's throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from outbox_core.queries import parse_blocks  # noqa: E402
from producer_lib import Event, Outbox, migrate  # noqa: E402
from relay.config import load_settings  # noqa: E402
from relay.pipeline.step import BatchOutcome  # noqa: E402
from relay.service import RelayService  # noqa: E402
from tests.support.kafka import create_topics, unique_topic_name  # noqa: E402
from tests.support.redis import read_stream, unique_stream_name  # noqa: E402
from tests.support.relay import judge, judge_topic  # noqa: E402

SQL = {
    name: parse_blocks((ROOT / "scripts" / "sql" / name).read_text(), name)
    for name in ("demo.sql", "demo_postgres.sql", "demo_sqlite.sql")
}


class Progress:
    """A one-line progress bar on a terminal; a line every 10% otherwise."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._last_decile = -1

    def add(self, n: int) -> None:
        self.done += n
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
        if self.tty:
            bar = "#" * int(frac * 30)
            sys.stderr.write(
                f"\r{self.label:<10} [{bar:<30}] {self.done:>8}/{self.total} {rate:>9.0f}/s"
            )
            sys.stderr.flush()
        elif int(frac * 10) != self._last_decile:
            self._last_decile = int(frac * 10)
            print(
                f"{self.label:<10} {self.done:>8}/{self.total} ({frac:.0%}) {rate:.0f}/s",
                file=sys.stderr,
            )

    def close(self) -> float:
        if self.tty:
            sys.stderr.write("\n")
        return time.perf_counter() - self.t0


def connect(url: str) -> Any:
    if url.startswith("sqlite:///"):
        return sqlite3.connect(url[len("sqlite:///") :], timeout=30)
    import psycopg

    return psycopg.connect(url)


def write_orders(url: str, topic: str, n: int, keys: int, per_tx: int) -> dict[str, list[str]]:
    """Commits n orders, per_tx per transaction; returns event_ids per key in commit order."""
    dialect_sql = SQL["demo_sqlite.sql" if url.startswith("sqlite") else "demo_postgres.sql"]
    outbox = Outbox()
    expected: dict[str, list[str]] = {}
    progress = Progress("orders", n)
    conn = connect(url)
    try:
        conn.execute(SQL["demo.sql"]["demo_orders_create"])
        conn.commit()
        for start in range(0, n, per_tx):
            events = []
            for i in range(start, min(start + per_tx, n)):
                order_id = str(uuid.uuid4())
                customer = f"customer-{i % keys}"
                conn.execute(
                    dialect_sql["demo_order_insert"],
                    {"id": order_id, "customer": customer, "amount_cents": 100 + i % 9000},
                )
                events.append(
                    Event(
                        topic,
                        customer,
                        "OrderPlaced",
                        {"order_id": order_id, "customer": customer, "n": i},
                    )
                )
            ids = outbox.emit_batch(conn, events)
            conn.commit()
            for event, event_id in zip(events, ids, strict=True):
                expected.setdefault(event.key, []).append(str(event_id))
            progress.add(len(events))
    finally:
        conn.close()
    progress.close()
    return expected


async def relay_until_drained(
    url: str, transport: dict[str, str], n: int, batch_size: int
) -> tuple[float, RelayService]:
    progress = Progress("relay", n)
    finished = asyncio.Event()

    def on_batch(outcome: BatchOutcome) -> None:
        if outcome.published:
            progress.add(outcome.published)
        if progress.done >= n:
            finished.set()

    settings = load_settings(
        database_url=url,
        **transport,
        batch_size=batch_size,
        heartbeat_interval_s=0.5,
        lease_ttl_s=5,
        http_port=0,
        log_level="WARNING",
    )
    service = RelayService(settings, on_batch=on_batch)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(finished.wait(), timeout=max(120.0, n / 500))
    finally:
        service.stop()
        await task
    return progress.close(), service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--events", type=int, default=20_000, help="orders to write (default 20000)"
    )
    parser.add_argument("--keys", type=int, default=1_000, help="distinct customers (Kafka keys)")
    parser.add_argument("--per-tx", type=int, default=100, help="orders per transaction")
    parser.add_argument("--batch-size", type=int, default=500, help="relay batch size")
    parser.add_argument(
        "--postgres", action="store_true", help="use Postgres (DATABASE_URL) instead of SQLite"
    )
    parser.add_argument(
        "--transport",
        choices=["kafka", "redis"],
        default="kafka",
        help="publish to Kafka (KAFKA_BOOTSTRAP_SERVERS) or Redis Streams (REDIS_URL)",
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.keys < 1 or args.per_tx < 1:
        parser.error("--events, --keys and --per-tx must be at least 1")
    redis = args.transport == "redis"
    transport = (
        {"transport": "redis", "redis_url": os.environ["REDIS_URL"]}
        if redis
        else {
            "kafka_bootstrap_servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"],
            "kafka_security_protocol": "PLAINTEXT",  # the local demo broker
        }
    )
    with tempfile.TemporaryDirectory(prefix="outbox-demo-") as tmp:
        if args.postgres:
            from tests.support.postgres import Databases

            databases = Databases(os.environ["DATABASE_URL"], "demo")
            url = databases.empty()
        else:
            url = f"sqlite:///{tmp}/demo.sqlite3"
        try:
            migrate(url)
            if redis:
                topic = unique_stream_name("demo-orders")  # a stream XADD creates
            else:
                topic = unique_topic_name("demo-orders")
                bootstrap = transport["kafka_bootstrap_servers"]
                asyncio.run(create_topics(bootstrap, [topic], partitions=6))
            where = "stream" if redis else "topic"
            print(f"database: {'Postgres' if args.postgres else 'SQLite'}; {where}: {topic}")
            expected = write_orders(url, topic, args.events, args.keys, args.per_tx)
            seconds, service = asyncio.run(
                relay_until_drained(url, transport, args.events, args.batch_size)
            )
            if redis:
                verdict = judge(asyncio.run(read_stream(transport["redis_url"], topic)), expected)
            else:
                verdict = asyncio.run(judge_topic(bootstrap, topic, expected))
        finally:
            if args.postgres:
                databases.close()
    all_ids = [e for ids in expected.values() for e in ids]
    missing = len(verdict.missing(all_ids))
    print(
        f"delivered {len(verdict.delivered & set(all_ids))}/{len(all_ids)}, missing {missing}, "
        f"duplicates {verdict.duplicates}, order violations {len(verdict.order_violations)}, "
        f"parked {service.stats.parked}"
    )
    print(
        f"relay throughput: {args.events / seconds:,.0f} events/s ({args.events} events in {seconds:.2f} s)"
    )
    ok = missing == 0 and not verdict.order_violations
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
