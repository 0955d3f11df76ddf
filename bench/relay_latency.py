"""Commit-to-Kafka latency of the relay with its default settings, one event per transaction.

A private database and a topic whose records the broker stamps when it appends them
(message.timestamp.type=LogAppendTime). `outbox-relay run` works on it with every setting
at its default. pgbench inserts rows producer_lib built beforehand (bench/shared/steady.py)
from --writers connections at the offered rate, one event per transaction in one round
trip, so the load generator leaves the two cores to the relay, Postgres and Kafka; each
event's payload carries its sequence number. The latency of an event is the broker's append
time minus its commit time (one clock: the same machine). The first --warmup-s of each load
are left out. Before the loads, the relay sits idle for --idle-s: what that costs
(statements per second on its database, CPU seconds of the relay and of Postgres per
second) is measured too.

    .venv/bin/python -m bench relay_latency [--rates 500,2000,5000] [--seconds 10]
        [--writers 16] [--plot docs/img/relay_latency.svg] [--transport redis]

With --transport redis the relay publishes to a Redis stream instead (REDIS_URL), and the
append time is the time in the entry id Redis assigns on XADD (its clock: the same
machine's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.shared.cli import (
    add_load,
    add_logdir,
    add_services,
    check_services,
    numbers,
    parser,
    run_guarded,
)
from bench.shared.database import private_database
from bench.shared.orders import TOPIC
from bench.shared.processes import launch, relay_env
from bench.shared.procstat import cpu_seconds
from bench.shared.steady import appended, latencies, load, percentile, statements, warm_up
from bench.shared.topics import APPEND_TIME, create_topic, delete_topics


@dataclass
class Point:
    offered: float
    achieved: float
    measured: int
    missing: int
    p50_ms: float
    p99_ms: float
    max_ms: float


async def appended_redis(
    redis_url: str, stream: str, wanted: range, timeout_s: float
) -> dict[int, float]:
    """seq -> Redis append time (s, from the entry id) of every wanted event on the stream."""
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    found: dict[int, float] = {}
    last = "-"
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(s in found for s in wanted):
            entries: Any = await client.xrange(stream, min=last, count=10_000)
            if last != "-":
                entries = entries[1:]  # the bound is inclusive
            if not entries:
                await asyncio.sleep(0.2)
                continue
            for entry_id, fields in entries:
                seq = int(json.loads(fields[b"payload"])["seq"])
                if seq in wanted:
                    found.setdefault(seq, int(entry_id.split(b"-")[0]) / 1000)
            last = entries[-1][0].decode()
    finally:
        await client.aclose()
    return found


def postgres_cpu(dbname: str) -> float:
    """CPU seconds of the Postgres backends serving dbname (their command line names it)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("postgres:") and f" {dbname} " in cmdline:
            total += cpu_seconds(int(entry.name)) or 0.0
    return total


async def run(args: argparse.Namespace) -> int:
    base, bootstrap = args.database_url, args.bootstrap
    redis_url = os.environ.get("REDIS_URL", "") if args.transport == "redis" else ""
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench-latency-{run_id}."
    topic = prefix + TOPIC
    logdir = Path(args.logdir or f"/tmp/relay-latency-{run_id}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    relay = None

    async def arrived(wanted: range, timeout_s: float) -> dict[int, float]:
        if redis_url:
            return await appended_redis(redis_url, topic, wanted, timeout_s)
        return await appended(bootstrap, topic, args.partitions, wanted, timeout_s)

    with private_database(base, "bench_latency") as (url, dbname):
        try:
            env = relay_env(url, bootstrap, prefix)
            if redis_url:
                env.update(OUTBOX_TRANSPORT="redis", OUTBOX_REDIS_URL=redis_url)
            else:
                await create_topic(bootstrap, topic, args.partitions, APPEND_TIME)
            relay = launch("relay", [sys.executable, "-m", "relay.cli", "run"], env, logdir)
            pid = relay.pid
            seq = await warm_up(url, args.keys, relay, arrived)
            # Postgres backends flush their statistics at most every 10 s when idle: wait
            # that out, so the warm-up's statements are not counted as the idle relay's.
            await asyncio.sleep(12.0)
            cpu0, pg0, tx0, t0 = (
                cpu_seconds(pid) or 0.0,
                postgres_cpu(dbname),
                statements(base, dbname),
                time.monotonic(),
            )
            await asyncio.sleep(args.idle_s)
            elapsed = time.monotonic() - t0
            idle_cpu = ((cpu_seconds(pid) or 0.0) - cpu0) / elapsed
            idle_pg = (postgres_cpu(dbname) - pg0) / elapsed
            idle_tx = (statements(base, dbname) - tx0) / elapsed
            print(
                f"idle relay: {idle_tx:.0f} statements/s on its database, relay CPU "
                f"{idle_cpu * 100:.1f}% of a core, Postgres CPU {idle_pg * 100:.1f}% of a core "
                f"(over {elapsed:.0f} s)",
                flush=True,
            )
            if args.ceiling_events:
                # What this machine can commit at all, one event per transaction, while the
                # relay publishes them: the offered rates above it cannot be met by any relay.
                commit_at, took = await asyncio.to_thread(
                    load, args, url, args.ceiling_events / args.seconds, seq, True
                )
                await arrived(range(seq, seq + len(commit_at)), 120)
                print(
                    f"commit ceiling: {len(commit_at) / took:,.0f} events/s (pgbench "
                    f"unthrottled, {args.writers} connections, the relay publishing meanwhile)",
                    flush=True,
                )
                seq += len(commit_at)
            points: list[Point] = []
            marks: list[float] = []  # the relay's CPU seconds as each load starts
            for rate in args.rates:
                commit_at, took = await asyncio.to_thread(
                    load, args, url, rate, seq, False, lambda: marks.append(cpu_seconds(pid) or 0)
                )
                got = await arrived(range(seq, seq + len(commit_at)), 120)
                relay_cpu = ((cpu_seconds(pid) or 0.0) - marks[-1]) / len(commit_at)
                lat, missing = latencies(commit_at, got, args.warmup_s)
                point = Point(
                    rate,
                    len(commit_at) / took,
                    len(lat),
                    missing,
                    percentile(lat, 0.5),
                    percentile(lat, 0.99),
                    lat[-1] if lat else float("nan"),
                )
                print(
                    f"offered {rate:,.0f}/s: committed {point.achieved:,.0f}/s, p50 "
                    f"{point.p50_ms:.1f} ms, p99 {point.p99_ms:.1f} ms, max {point.max_ms:.1f} "
                    f"ms, missing {point.missing}, relay CPU {relay_cpu * 1e6:.0f} us/event "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                points.append(point)
                seq += len(commit_at)
            report(points, args.plot)
            return 0
        finally:
            if relay is not None:
                relay.stop()
            if redis_url:
                await _delete_stream(redis_url, topic)
            else:
                await delete_topics(bootstrap, [topic])


def report(points: list[Point], plot: str | None) -> None:
    print()
    print(
        "| offered events/s | committed events/s | p50 ms | p99 ms | max ms | measured | missing |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in points:
        print(
            f"| {p.offered:,.0f} | {p.achieved:,.0f} | {p.p50_ms:.1f} | {p.p99_ms:.1f} | "
            f"{p.max_ms:.1f} | {p.measured:,} | {p.missing} |"
        )
    if plot:
        from bench.shared.plot import latency_plot

        written = latency_plot(
            Path(plot),
            [("relay (defaults)", p.offered, p.p50_ms, p.p99_ms) for p in points],
            target_ms=25.0,
            target_at=None,
            title="Commit to Kafka latency against offered load",
        )
        print("plot: " + ", ".join(map(str, written)))


async def _delete_stream(redis_url: str, stream: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        await client.delete(stream)
    finally:
        await client.aclose()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    add_load(p, rate=None, seconds=10.0, warmup_s=1.0, writers=16)
    p.add_argument("--rates", type=numbers(float), default=[500.0, 2000.0, 5000.0])
    p.add_argument(
        "--ceiling-events",
        type=int,
        default=30_000,
        help="events committed unthrottled before the loads, to measure the machine's commit "
        "ceiling (0: skip)",
    )
    p.add_argument("--idle-s", type=float, default=10.0, help="idle time measured before the loads")
    p.add_argument("--plot", help="write a latency-vs-rate chart here (.svg and .png)")
    p.add_argument(
        "--transport",
        choices=["kafka", "redis"],
        default="kafka",
        help="where the relay publishes (redis: REDIS_URL)",
    )
    add_logdir(p)
    args = p.parse_args(argv)
    check_services(p, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("relay_latency", lambda: asyncio.run(run(args)))
