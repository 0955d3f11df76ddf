"""Transactions per second on Postgres with and without producer_lib's emit, in one run.

Each transaction is a one-row business write: BEGIN; INSERT INTO orders ... RETURNING id;
COMMIT. The emit variants add `Outbox.emit(...)` of a ~300-byte JSON event to the same
transaction, with the per-key advisory lock on (the default) or off. The variants are
interleaved in rounds (the order rotates every round) so that a noisy machine slows all of
them alike; the report gives the median tx/s of each and the ratio to the baseline.

    .venv/bin/python -m bench emit_overhead [--transactions 2000] [--rounds 5] [--clients 1]

The benchmark creates a private database bench_<random> on DATABASE_URL's server, migrates
it with outbox_core.migrate and drops it at the end. It is a measurement: it exits 0
whatever the overhead, and non-zero only on errors.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence

import psycopg

from bench.emit.report import Result, print_table, ratio
from bench.emit.variants import build_variants, timed
from bench.shared.cli import add_services, check_services, parser, run_guarded
from bench.shared.database import load_sql, private_database, server_version
from bench.shared.orders import DISTINCT_KEYS, make_orders, order_payload
from producer_lib import Outbox

TARGET_OVERHEAD = 0.15


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p, kafka=False)
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
    args = p.parse_args(argv)
    check_services(p, args)
    for name in ("transactions", "rounds", "clients"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    return args


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    version = server_version(args.database_url)
    cleanup: list[Callable[[], None]] = []
    with private_database(args.database_url, "bench_emit") as (url, dbname):
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(load_sql("orders.sql")["orders_create_table"])
            variants = build_variants(url, args.clients, args.sqlalchemy, cleanup)
            sample = order_payload(1, make_orders(rng, 1)[0])
            payload_bytes = len(Outbox().serializer(sample).data)
            print(f"server:   {version}")
            print(
                f"workload: {args.rounds} rounds x {args.transactions} tx per variant, "
                f"{args.clients} client(s), {DISTINCT_KEYS} keys, payload {payload_bytes} B "
                f"JSON, database {dbname}"
            )
            if args.warmup:
                warm = make_orders(rng, args.warmup)
                for v in variants:
                    timed(v.runners, warm)
            tps: dict[str, list[float]] = {v.name: [] for v in variants}
            for rnd in range(args.rounds):
                shift = rnd % len(variants)
                line = []
                for v in variants[shift:] + variants[:shift]:
                    seconds = timed(v.runners, make_orders(rng, args.transactions))
                    tps[v.name].append(args.transactions / seconds)
                    line.append(f"{v.name} {tps[v.name][-1]:.0f}")
                print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(line) + " tx/s", flush=True)
        finally:
            for close in reversed(cleanup):
                try:
                    close()
                except Exception as exc:
                    print(f"emit_overhead: cleanup: {exc}", file=sys.stderr)

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
