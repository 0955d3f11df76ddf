"""Does one row for a topic that does not exist slow the other topics down?

Each round drains EVENTS ordinary events over a few topics with the relay (in this
process, default settings, retention=delete), once as they are ("clean") and once with
one row for a topic missing from the cluster written first, at the head of its shard
("missing"); odd rounds drain clean first, even rounds missing first. Each drain has a Postgres database of its own and the same events. The
rate is events published per second from the relay's start to the last of them; the
ratio is missing / clean of the same round. The broker must have auto-create off (as
scripts/services configures it), or the missing topic would simply be created.

    .venv/bin/python bench/missing_topic.py --database-url URL --bootstrap HOST:PORT \
        [--events 20000] [--topics 4] [--rounds 3]

Prints a markdown table, a row per round, and the median ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from bench.database import admin, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from outbox_core.migrate import migrate  # noqa: E402
from producer_lib import Event, Outbox  # noqa: E402
from relay.config import load_settings  # noqa: E402
from relay.service import RelayService  # noqa: E402

CHUNK = 1000  # events per producer transaction


def write(url: str, topics: list[str], events: int, missing: str | None) -> None:
    outbox = Outbox()
    with psycopg.connect(url, autocommit=False) as conn:
        if missing is not None:
            outbox.emit_batch(conn, [Event(missing, "k-missing", "Lost", {"n": -1})])
            conn.commit()
        for start in range(0, events, CHUNK):
            outbox.emit_batch(
                conn,
                (
                    Event(topics[n % len(topics)], f"k-{n % 997}", "OrderPlaced", {"n": n})
                    for n in range(start, min(events, start + CHUNK))
                ),
            )
            conn.commit()


async def drain(url: str, bootstrap: str, events: int) -> float:
    """Seconds from the relay's start until `events` rows were published."""
    settings = load_settings(
        database_url=url,
        kafka_bootstrap_servers=bootstrap,
        kafka_security_protocol="PLAINTEXT",
        retention="delete",
        http_port=0,
    )
    service = RelayService(settings)
    started = time.monotonic()
    task = asyncio.create_task(service.run())
    try:
        while service.stats.published < events:
            if task.done():
                task.result()
                raise RuntimeError("the relay stopped")
            await asyncio.sleep(0.01)
        return time.monotonic() - started
    finally:
        service.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)


async def one_drain(args: argparse.Namespace, topics: list[str], missing: str | None) -> float:
    dbname = f"bench_missing_{uuid.uuid4().hex[:8]}"
    admin(args.database_url, "bench_database_create", dbname)
    try:
        url = with_database(args.database_url, dbname)
        migrate(url)
        await asyncio.to_thread(write, url, topics, args.events, missing)
        seconds = await drain(url, args.bootstrap, args.events)
        return float(args.events / seconds)
    finally:
        admin(args.database_url, "bench_database_drop", dbname)


async def run(args: argparse.Namespace) -> int:
    run_id = uuid.uuid4().hex[:8]
    topics = [f"bench-topics-{run_id}-{n}" for n in range(args.topics)]
    kafka = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap)
    await kafka.start()
    try:
        await kafka.create_topics([NewTopic(t, 4, 1) for t in topics])
        await asyncio.sleep(1.0)  # leaders elected
        rows = [["round", "clean ev/s", "with a missing topic ev/s", "ratio"]]
        ratios: list[float] = []
        for n in range(1, args.rounds + 1):
            missing = f"bench-missing-{run_id}-{n}"
            # Alternate which goes first: the first drain of a round pays for warming up.
            if n % 2:
                clean = await one_drain(args, topics, None)
                held = await one_drain(args, topics, missing)
            else:
                held = await one_drain(args, topics, missing)
                clean = await one_drain(args, topics, None)
            if missing in set(await kafka.list_topics()):
                raise RuntimeError("the broker auto-created the missing topic: turn it off")
            ratios.append(held / clean)
            rows.append([str(n), f"{clean:,.0f}", f"{held:,.0f}", f"{held / clean:.2f}"])
            print(f"round {n}: clean {clean:,.0f} ev/s, missing {held:,.0f} ev/s", flush=True)
        print("\n".join(markdown_table(rows, 1)))
        print(f"\nmedian ratio (missing / clean): {statistics.median(ratios):.2f}")
        await kafka.delete_topics(topics)
    finally:
        await kafka.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", required=True, help="a Postgres server (a database per drain)")
    p.add_argument("--bootstrap", required=True, help="Kafka, auto.create.topics.enable=false")
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--topics", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # "topic not found": the point
    return run_guarded("missing_topic", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
