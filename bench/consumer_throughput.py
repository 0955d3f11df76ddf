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
- plain, batched:  the plain loop with one transaction per partition's share of a getmany
                   batch (one INSERT per event in it), then that partition's offset. No dedup.
- consumer_lib:    Consumer(ConsumerApp) with PsycopgAsync, default settings (batch apply,
                   up to 4 partitions at once); the handler runs the same INSERT on its
                   connection.
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
import os
import platform
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.consume.contenders import (  # noqa: E402
    BASELINE,
    BATCHED,
    DISTURBED,
    LIB,
    SQL,
    SQLALCHEMY,
    Target,
    variants,
)
from bench.consume.report import Result, print_table, versions  # noqa: E402
from bench.consume.topics import drop_topics, fill_topics  # noqa: E402
from bench.database import admin, server_version, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.orders import DISTINCT_KEYS  # noqa: E402
from outbox_core.database_url import DatabaseUrl  # noqa: E402
from producer_lib import migrate  # noqa: E402


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
        found = {r.name: r.median for r in results if r.partitions == partitions}
        lib, base, batched = found[LIB], found[BASELINE], found[BATCHED]
        print(
            f"{partitions} partition(s): consumer_lib with dedup applies "
            f"{lib / base:.2f}x the events/s of the plain per-event consumer without dedup, "
            f"{lib / batched:.2f}x the plain batched consumer without dedup"
        )
        if SQLALCHEMY in found:
            print(
                f"{partitions} partition(s): consumer_lib SqlAlchemyAsync applies "
                f"{found[SQLALCHEMY] / batched:.2f}x the plain batched consumer without dedup"
            )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("consumer_throughput", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
