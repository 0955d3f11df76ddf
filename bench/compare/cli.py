"""The command line of `python -m bench relay_compare` and one run of it: services, the template, the
drains round by round, the latency phase, the report."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.compare.backlog import build_template
from bench.compare.ceiling import drain_ceiling, drain_kafka
from bench.compare.common import (
    BENCH_CACHE,
    BENCH_KAFKA_PORT,
    BENCH_PG_PORT,
    CONTENDERS,
    FLOORS,
    FULL_RUN,
    LABELS,
    LOAD_CHUNK,
    MARIADB_TWINS,
    ROOT,
    say,
)
from bench.compare.context import Context
from bench.compare.debezium import connect_libs, drain_debezium, latency_debezium
from bench.compare.drain import Drain, median_drain
from bench.compare.latency import LatencyPoint
from bench.compare.naive import drain_naive
from bench.compare.ours import (
    RELAY_GATHER_S,
    drain_floor,
    drain_relay,
    latency_floor,
    latency_ours,
)
from bench.compare.report import render, write_docs
from bench.compare.services import server_settings, start_services
from bench.compare.targets import mariadb_ratios
from bench.shared.procstat import loadavg

# The contenders with an offered-load latency phase.
LATENCY_CONTENDERS = ("ours", "ours-mariadb", *FLOORS, "debezium")


def parse_args(argv: Sequence[str] | None, doc: str | None) -> argparse.Namespace:
    """doc: the --help text, bench/relay_compare.py's docstring."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--ci",
        action="store_true",
        help="small check: 10k events, ours vs naive, env services, exit 1 unless ours is faster",
    )
    p.add_argument(
        "--events", type=int, default=None, help="backlog size (default 200000; 10000 with --ci)"
    )
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=8, help="partitions per topic (default 8)")
    p.add_argument(
        "--contenders",
        default=None,
        help=f"comma list of {','.join(CONTENDERS)} (default all but ours2; ours,naive with --ci)",
    )
    p.add_argument("--rounds", type=int, default=1, help="drains per contender (median reported)")
    p.add_argument(
        "--naive-max-s",
        type=float,
        default=None,
        help="stop the naive relay after this many seconds of draining (default 60; 20 with --ci; 0: let it finish)",
    )
    p.add_argument(
        "--latency",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the offered-load latency phase (default on; off with --ci)",
    )
    p.add_argument("--latency-rates", default="500,2000,5000")
    p.add_argument(
        "--latency-contenders",
        default=None,
        help=f"comma list of {', '.join(LATENCY_CONTENDERS)} (default: those of them in "
        "--contenders)",
    )
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument("--latency-warmup-s", type=float, default=2.0)
    p.add_argument(
        "--services",
        choices=["bench", "env"],
        default=None,
        help="bench: own Postgres+Kafka (default); env: DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS",
    )
    p.add_argument(
        "--cache-dir", default=os.environ.get("OUTBOX_BENCH_CACHE_DIR", str(BENCH_CACHE))
    )
    p.add_argument(
        "--mariadb-url",
        default=os.environ.get("MARIADB_URL", ""),
        help="a MariaDB server (mysql://user:password@host:port/, a user that may create "
        "databases) for ours-mariadb (default: MARIADB_URL)",
    )
    p.add_argument("--pg-port", type=int, default=BENCH_PG_PORT)
    p.add_argument("--kafka-port", type=int, default=BENCH_KAFKA_PORT)
    p.add_argument(
        "--write-docs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write docs/benchmarks.md and docs/img/ (default: on for a run of every contender "
        "of the full comparison, off for fewer and with --ci: a partial run must not replace "
        "the table)",
    )
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.events is None:
        args.events = 10_000 if args.ci else 200_000
    if args.contenders is None:
        args.contenders = "ours,naive" if args.ci else ",".join(FULL_RUN)
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in args.contenders:
        if c not in CONTENDERS:
            p.error(f"unknown contender {c!r}")
    if args.naive_max_s is None:
        # The naive relay drains ~100-500 events/s here: a full drain of the default
        # backlog would take most of an hour; its rate is steady, so a window measures it.
        args.naive_max_s = 20.0 if args.ci else 60.0
    if args.latency is None:
        args.latency = not args.ci
    if args.services is None:
        args.services = "env" if args.ci else "bench"
    if args.write_docs is None:
        args.write_docs = not args.ci and set(FULL_RUN) <= set(args.contenders)
    args.latency_rates = [float(r) for r in args.latency_rates.split(",") if r]
    if args.latency_contenders is None:
        args.latency_contenders = ",".join(c for c in LATENCY_CONTENDERS if c in args.contenders)
    args.latency_contenders = [c.strip() for c in args.latency_contenders.split(",") if c.strip()]
    for c in args.latency_contenders:
        if c not in LATENCY_CONTENDERS:
            p.error(f"no latency phase for {c!r}: choose from {', '.join(LATENCY_CONTENDERS)}")
    wants_mariadb = set(MARIADB_TWINS) & {*args.contenders, *args.latency_contenders}
    if wants_mariadb and not args.mariadb_url:
        p.error(f"{', '.join(sorted(wants_mariadb))} needs --mariadb-url or MARIADB_URL")
    if args.events < LOAD_CHUNK or args.rounds < 1 or args.partitions < 1:
        p.error("--events must be at least 1000; --rounds and --partitions at least 1")
    return args


async def run(args: argparse.Namespace) -> int:
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    load_before = loadavg()
    services = start_services(args)
    run_id = uuid.uuid4().hex[:8]
    logdir = Path(tempfile.mkdtemp(prefix=f"outbox-bench-{run_id}-"))
    say(f"run {run_id}: logs in {logdir}; load average {load_before}")
    need_debezium = "debezium" in args.contenders or (
        args.latency and "debezium" in args.latency_contenders
    )
    libs = connect_libs(services.cache or Path(args.cache_dir)) if need_debezium else None
    if need_debezium and server_settings(services.url)[1] != "logical":
        raise RuntimeError(
            "Debezium needs wal_level=logical on this Postgres (use --services bench)"
        )
    backlog = build_template(services, run_id, args.events, args.keys, args.seed)
    ctx = Context(args, services, backlog, run_id, logdir)
    drains: dict[str, list[Drain]] = {}
    points: list[LatencyPoint] = []
    try:
        for round_no in range(args.rounds):
            order = list(args.contenders)
            if round_no % 2:
                order.reverse()
            for name in order:
                say(
                    f"drain {name} (round {round_no + 1}/{args.rounds}): loading {backlog.events:,} events"
                )
                if name in ("ours", "ours-delete", "ours2", "ours-mariadb"):
                    d = await drain_relay(ctx, name, round_no)
                elif name in FLOORS:
                    d = await drain_floor(ctx, name, round_no)
                elif name == "naive":
                    d = await drain_naive(ctx, round_no)
                elif name in ("ceiling", "ceiling-keep"):
                    d = await drain_ceiling(ctx, round_no, keep=name == "ceiling-keep")
                elif name == "kafka":
                    d = await drain_kafka(ctx, round_no)
                else:
                    assert libs is not None
                    d = await drain_debezium(ctx, libs, round_no)
                drains.setdefault(name, []).append(d)
                say(
                    f"drain {name}: {d.rate:,.0f} events/s ({d.counted:,} records in {d.active_s:.1f}s, "
                    f"start-up {d.startup_s:.1f}s, CPU {d.cpu_us_per_event:.1f} µs/event, peak RSS "
                    f"{d.peak_rss_bytes / 2**20:.0f} MiB, load {d.loadavg}) {d.note}"
                )
                if d.audit is not None:
                    a = d.audit
                    say(
                        f"audit {name}: {a.records:,} records, {a.distinct:,} distinct events, "
                        f"{a.lost:,} lost, {a.duplicates:,} duplicates, "
                        f"{a.order_violations:,} order violations, {a.unpublished:,} unpublished, "
                        f"{a.unreadable:,} unreadable"
                    )
        if args.latency:
            for name in ("ours", "ours-mariadb"):
                if name in args.latency_contenders:
                    points += await latency_ours(ctx, name)
            for name in FLOORS:
                if name in args.latency_contenders:
                    points += await latency_floor(ctx, name, RELAY_GATHER_S, False, settle=True)
            if "debezium" in args.latency_contenders:
                assert libs is not None
                points += await latency_debezium(ctx, libs)
    finally:
        await ctx.close()
    load_after = loadavg()
    plot_rel: str | None = None
    if args.write_docs and points:
        from bench.shared import plot

        chart = ROOT / "docs" / "img" / "relay_latency.svg"
        plot.latency_plot(
            chart, [(LABELS[p.contender], p.offered, p.p50_ms, p.p99_ms) for p in points]
        )
        plot_rel = "img/relay_latency.svg"
    report = render(
        args, services, backlog, drains, points, plot_rel, load_before, load_after, started
    )
    print(report)
    if args.write_docs:
        say(f"wrote {write_docs(report)}")
    ours, naive = drains.get("ours"), drains.get("naive")
    if ours and naive:
        o, n = median_drain(ours).rate, median_drain(naive).rate
        say(
            f"ours/naive: {o / n if n else float('inf'):.2f} (ours {o:,.0f} events/s, naive {n:,.0f} events/s)"
        )
    for line in mariadb_ratios(drains, points):
        say(line)
    # CI checks that the harness measures exact, ordered drains (every event on the topic
    # or still in the outbox of a contender stopped at its cap); which contender is faster
    # is the bench's finding, not something a shared CI machine can promise.
    broken = sorted(
        {
            name
            for name, runs in drains.items()
            for d in runs
            if d.audit is None
            or d.audit.lost
            or d.audit.order_violations
            or d.audit.distinct + d.audit.unpublished != backlog.events
        }
    )
    if args.ci and broken:
        say(f"FAIL: events lost or out of order in the drains of {broken}")
        return 1
    if services.own:
        say(
            f"the bench services keep running; stop them with: OUTBOX_CACHE_DIR={services.cache} OUTBOX_PG_PORT={args.pg_port} OUTBOX_KAFKA_PORT={args.kafka_port} .venv/bin/python scripts/services.py down"
        )
    if args.ci:
        shutil.rmtree(logdir, ignore_errors=True)
    else:
        say(f"logs of this run: {logdir}")
    return 0


def main(argv: Sequence[str] | None = None, doc: str | None = None) -> int:
    args = parse_args(argv, doc)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        print("relay_compare: interrupted", file=sys.stderr)
        return 130
