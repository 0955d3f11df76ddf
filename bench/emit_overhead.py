"""Transactions per second on Postgres with and without producer_lib's emit, in one run.

Each transaction is a one-row business write: BEGIN; INSERT INTO orders ... RETURNING id;
COMMIT. The emit variants add `Outbox.emit(...)` of a ~300-byte JSON event to the same
transaction, with the per-key advisory lock on (the default) or off. The variants are
interleaved in rounds (the order rotates every round) so that a noisy machine slows all of
them alike; the report gives the median tx/s of each and the ratio to the baseline.

    eval "$(.venv/bin/python scripts/services.py env)"
    .venv/bin/python bench/emit_overhead.py [--transactions 2000] [--rounds 5] [--clients 1]

The benchmark creates a private database bench_<random> on DATABASE_URL's server, migrates
it with outbox_core.migrate and drops it at the end. It is a measurement: it exits 0
whatever the overhead, and non-zero only on errors.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.database import SQL_DIR, admin, load_sql, server_version, with_database  # noqa: E402
from bench.emit.report import Result, print_table, ratio  # noqa: E402
from bench.emit.variants import build_variants, timed  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from bench.orders import (  # noqa: E402
    DISTINCT_KEYS,
    EVENT_TYPE,
    TOPIC,
    make_orders,
    order_payload,
    sequenced_order_event,
)
from outbox_core.database_url import DatabaseUrl  # noqa: E402
from producer_lib import Outbox, migrate  # noqa: E402

# Other benchmarks import the shared workload and database helpers from here too.
__all__ = [
    "DISTINCT_KEYS",
    "EVENT_TYPE",
    "SQL_DIR",
    "TOPIC",
    "admin",
    "load_sql",
    "main",
    "make_orders",
    "markdown_table",
    "order_payload",
    "sequenced_order_event",
    "server_version",
    "with_database",
]


TARGET_OVERHEAD = 0.15


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--transactions", type=int, default=2000, help="per variant per round (default 2000)"
    )
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument(
        "--clients", type=int, default=1, help="threads, one connection each (default 1)"
    )
    p.add_argument(
        "--warmup", type=int, default=200, help="unmeasured transactions per variant first"
    )
    p.add_argument(
        "--sqlalchemy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure a SQLAlchemy ORM Session pair, baseline vs emit (default on)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="server to create the private database on (default $DATABASE_URL)",
    )
    args = p.parse_args(argv)
    if not args.database_url:
        p.error('DATABASE_URL is not set: eval "$(.venv/bin/python scripts/services.py env)"')
    for name in ("transactions", "rounds", "clients"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    return args


def run(args: argparse.Namespace) -> int:
    server_url = DatabaseUrl.parse(args.database_url).url
    if DatabaseUrl.parse(args.database_url).dialect != "postgres":
        print("emit_overhead: DATABASE_URL must be a Postgres URL", file=sys.stderr)
        return 2
    dbname = f"bench_{uuid.uuid4().hex[:12]}"
    url = with_database(server_url, dbname)
    rng = random.Random(args.seed)
    version = server_version(server_url)
    admin(server_url, "bench_database_create", dbname)
    cleanup: list[Callable[[], None]] = []
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(load_sql("orders.sql")["orders_create_table"])
        variants = build_variants(url, args.clients, args.sqlalchemy, cleanup)
        sample = order_payload(1, make_orders(rng, 1)[0])
        payload_bytes = len(Outbox().serializer(sample).data)

        print(f"server:   {version}")
        print(
            f"workload: {args.rounds} rounds x {args.transactions} tx per variant, "
            f"{args.clients} client(s), {DISTINCT_KEYS} keys, payload {payload_bytes} B JSON, "
            f"database {dbname}"
        )
        if args.warmup:
            warm = make_orders(rng, args.warmup)
            for v in variants:
                timed(v.runners, warm)

        tps: dict[str, list[float]] = {v.name: [] for v in variants}
        for rnd in range(args.rounds):
            shift = rnd % len(variants)
            order = variants[shift:] + variants[:shift]
            line = []
            for v in order:
                orders = make_orders(rng, args.transactions)
                seconds = timed(v.runners, orders)
                tps[v.name].append(args.transactions / seconds)
                line.append(f"{v.name} {tps[v.name][-1]:.0f}")
            print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(line) + " tx/s", flush=True)
    finally:
        for close in reversed(cleanup):
            try:
                close()
            except Exception as exc:
                print(f"emit_overhead: cleanup: {exc}", file=sys.stderr)
        admin(server_url, "bench_database_drop", dbname)

    results = [Result(v.name, v.baseline, tps[v.name]) for v in variants]
    print()
    print_table(results, args.clients)
    by_name = {r.name: r for r in results}
    on = ratio(by_name["psycopg emit, lock on"], by_name)
    off = ratio(by_name["psycopg emit, lock off"], by_name)
    assert on is not None
    assert off is not None
    print()
    print(
        f"overhead: emit adds {1 - on:.1%} (lock on), {1 - off:.1%} (lock off); "
        f"target <= {TARGET_OVERHEAD:.0%}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("emit_overhead", lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
