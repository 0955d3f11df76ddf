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

    .venv/bin/python -m bench consumer_throughput [--events 20000] [--rounds 3]

A private database bench_<random> on DATABASE_URL's server and topics bench-consumer-* are
created and removed at the end. It is a measurement: exit 0 whatever the ratio, non-zero
only on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import uuid
from collections.abc import Sequence

import psycopg

from bench.consume.contenders import (
    BASELINE,
    BATCHED,
    DISTURBED,
    LIB,
    SQL,
    SQLALCHEMY,
    Target,
    variants,
)
from bench.consume.report import Result, print_table, versions
from bench.consume.topics import fill_topics
from bench.shared.cli import add_services, check_services, numbers, parser, run_guarded
from bench.shared.database import private_database, server_version
from bench.shared.orders import DISTINCT_KEYS
from bench.shared.topics import delete_topics


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    p.add_argument("--events", type=int, default=20_000, help="per topic (default 20000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--partitions",
        type=numbers(int),
        default=[1, 6],
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
    args = p.parse_args(argv)
    check_services(p, args)
    if args.events < 1 or args.rounds < 1:
        p.error("--events and --rounds must be at least 1")
    args.partition_counts = args.partitions
    if not args.partition_counts or any(n < 1 for n in args.partition_counts):
        p.error("--partitions: at least 1 each")
    return args


async def run(args: argparse.Namespace) -> int:
    prefix = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    version = server_version(args.database_url)
    topics: dict[int, str] = {}
    groups: list[str] = []
    with private_database(args.database_url, "bench_consumer") as (url, dbname):
        try:
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
                    chosen = [
                        v for v in all_variants if partitions > 1 or not v.multi_partition_only
                    ]
                    shift = rnd % len(chosen)
                    line = []
                    for v in chosen[shift:] + chosen[:shift]:
                        with psycopg.connect(url, autocommit=True) as conn:
                            conn.execute(SQL["applied_orders_reset"])
                        group = f"{prefix}-{len(groups)}"
                        groups.append(group)
                        target = Target(
                            args.bootstrap, topic, group, url, args.events, args.timeout
                        )
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
            await delete_topics(args.bootstrap, list(topics.values()))

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
