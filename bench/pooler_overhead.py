"""What a transaction pooler costs the relay's drain: the same backlog drained straight from
Postgres and through PgBouncer in transaction mode (OUTBOX_DATABASE_POOLER=transaction: a
BEGIN, the session settings and a COMMIT around each statement, no prepared statements),
in the same run, alternating, each drain on a fresh copy of the backlog and a fresh topic.

Prints each drain's rate and the ratio of the pooled median to the direct median.

    .venv/bin/python bench/pooler_overhead.py [--events 50000] [--rounds 2]

Uses the services of `scripts/services env` (DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS,
PGBOUNCER_URL); without PGBOUNCER_URL it starts a pgbouncer of its own
(scripts/service_pgbouncer.py) on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare.backlog import build_template, copy_database, drop_database, load_backlog
from bench.compare.common import loadavg, say
from bench.compare.services import Services
from bench.compare.topics import TopicCounter, create_topic, delete_topics
from bench.emit_overhead import TOPIC
from relay.config import load_settings
from relay.service import RelayService
from scripts.ports import reserved_port
from scripts.service_pgbouncer import pgbouncer_start, pgbouncer_stop


@contextlib.contextmanager
def pgbouncer(server_url: str) -> Iterator[str]:
    given = os.environ.get("PGBOUNCER_URL")
    if given:
        yield given
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-pgbouncer-"))
    folder.chmod(0o755)  # the postgres user runs it when we are root
    try:
        yield pgbouncer_start(reserved_port(), folder, server_url)
    finally:
        pgbouncer_stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def drain(url: str, bootstrap: str, events: int, partitions: int, pooler: str) -> float:
    """Seconds from the relay's start until every event is on its topic."""
    prefix = f"bench.{uuid.uuid4().hex[:8]}.pooler."
    topic = prefix + TOPIC
    await create_topic(bootstrap, topic, partitions)
    try:
        settings = load_settings(
            database_url=url,
            kafka_bootstrap_servers=bootstrap,
            kafka_security_protocol="PLAINTEXT",
            topic_prefix=prefix,
            http_enabled=False,
            database_pooler=pooler,
        )
        service = RelayService(settings)
        started = time.perf_counter()
        task = asyncio.create_task(service.run())
        async with TopicCounter(bootstrap, topic, partitions) as counter:
            for _ in range(36_000):  # 30 minutes at most
                if await counter.count() >= events:
                    break
                await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        service.stop()
        await task
    finally:
        await delete_topics(bootstrap, [topic])
    return elapsed


async def run(args: argparse.Namespace) -> int:
    services = Services(os.environ["DATABASE_URL"], os.environ["KAFKA_BOOTSTRAP_SERVERS"], False)
    run_id = uuid.uuid4().hex[:8]
    backlog = build_template(services, run_id, args.events, 1000, 1)
    rates: dict[str, list[float]] = {"direct": [], "pgbouncer": []}
    before = loadavg()
    try:
        with pgbouncer(services.url) as pooled:
            for round_ in range(args.rounds):
                # Alternate which goes first, so neither always drains on a warmer machine.
                order = ["direct", "pgbouncer"] if round_ % 2 == 0 else ["pgbouncer", "direct"]
                for mode in order:
                    name = f"bench_{run_id}_{mode}_{round_}"
                    url = copy_database(services, backlog, name)
                    try:
                        load_backlog(url, backlog.events)
                        target = url if mode == "direct" else _database(pooled, name)
                        pooler = "none" if mode == "direct" else "transaction"
                        seconds = await drain(
                            target, services.bootstrap, backlog.events, args.partitions, pooler
                        )
                    finally:
                        drop_database(services, name)
                    rate = backlog.events / seconds
                    rates[mode].append(rate)
                    say(f"round {round_} {mode}: {seconds:.2f}s, {rate:,.0f} events/s")
    finally:
        drop_database(services, backlog.template)
    direct, pooled_rate = statistics.median(rates["direct"]), statistics.median(rates["pgbouncer"])
    print("| path | drains | median events/s |")
    print("|---|---:|---:|")
    print(f"| direct | {len(rates['direct'])} | {direct:,.0f} |")
    print(f"| through PgBouncer (transaction) | {len(rates['pgbouncer'])} | {pooled_rate:,.0f} |")
    print(f"ratio pgbouncer / direct: {pooled_rate / direct:.2f}; load {before} -> {loadavg()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--partitions", type=int, default=8)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
