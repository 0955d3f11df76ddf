"""What a fleet of relays costs against one relay, on one database: idle, and at a steady load.

A private database and topic, as bench/relay_latency.py. For each fleet size (--fleets,
default 1 and 12), that many `outbox-relay run` processes start on the database with
--active-replicas (OUTBOX_ACTIVE_REPLICAS, default 1: one replica holds the shards, the
others stand by); a warm-up is delivered, then:

- idle: for --idle-s, the database's transactions per second (pg_stat_database
  xact_commit + xact_rollback deltas of the bench database; every relay statement is its
  own transaction) and the relays' CPU, all processes together (/proc);
- steady: --rate events/s for --seconds, one event per transaction (bench/shared/steady.py,
  the latency benchmark's writer), commit-to-Kafka latency per event (the broker's
  LogAppendTime minus Postgres's commit timestamp: the first moment a consumer can see
  the event) and the relays' CPU over the load.

Every figure is printed with its ratio to the first fleet of the run (the baseline), and
the load average, since only ratios of one run mean anything on a shared machine.

    .venv/bin/python -m bench relay_fleet [--fleets 1,12] [--idle-s 30] [--rate 1500]
        [--seconds 60] [--active-replicas 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
from bench.shared.processes import Proc, launch, relay_env
from bench.shared.procstat import cpu_seconds
from bench.shared.steady import appended, latencies, load, percentile, statements, warm_up
from bench.shared.topics import APPEND_TIME, private_topic
from scripts.ports import reserved_port


@dataclass
class FleetRun:
    label: str  # the fleet's size, or the floor loop's gather
    idle_tx_s: float
    idle_cpu: float  # cores, all relays together
    steady_tx_s: float
    steady_cpu: float
    p50_ms: float
    p99_ms: float
    missing: int
    load_avg: float


COUNTERS = ("probes", "claims", "settles", "heartbeats")
# The latency bar the relay and the floor are compared at (commit to Kafka, p99).
MAX_P99_MS = 25.0


def _cpu(procs: list[Proc]) -> float:
    return sum(cpu_seconds(p.pid) or 0.0 for p in procs)


def launch_relays(env: dict[str, str], count: int, name: str, logdir: Path) -> dict[int, Proc]:
    """count `outbox-relay run` processes with env, each with a replica id and an HTTP port
    of its own: port -> process."""
    procs: dict[int, Proc] = {}
    for i in range(count):
        port = reserved_port()
        procs[port] = launch(
            f"{name}-{i}",
            [sys.executable, "-m", "relay.cli", "run"],
            {**env, "OUTBOX_REPLICA_ID": f"relay-{i:03d}", "OUTBOX_HTTP_PORT": str(port)},
            logdir,
        )
    return procs


def _counters(ports: list[int]) -> dict[str, float]:
    """The fleet's outbox_relay_<name>_total, summed over its replicas' /metrics."""
    total = dict.fromkeys(COUNTERS, 0.0)
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            for name in COUNTERS:
                if line.startswith(f"outbox_relay_{name}_total "):
                    total[name] += float(line.split()[1])
    return total


def _rates(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    return ", ".join(f"{n} {(after[n] - before[n]) / seconds:.1f}/s" for n in COUNTERS)


async def one_fleet(
    args: argparse.Namespace,
    size: int,
    logdir: Path,
    floor_gather: float | None = None,
    floor_client: str = "aiokafka",
    floor_kind: str = "take",
    gather: float | None = None,
) -> FleetRun:
    """size relays (gather: their probe_gather_s), or with floor_gather
    bench/steady_floor.py's loop sleeping that long on floor_client (floor_kind settle: its
    at-least-once loop), on a private database and topic."""
    prefix = f"bench-fleet-{uuid.uuid4().hex[:8]}."
    async with contextlib.AsyncExitStack() as stack:
        url, dbname = stack.enter_context(private_database(args.database_url, "bench_fleet"))
        topic = await stack.enter_async_context(
            private_topic(args.bootstrap, prefix + TOPIC, args.partitions, APPEND_TIME)
        )
        procs: list[Proc] = []

        def stop() -> None:
            for p in procs:
                p.stop()

        stack.callback(stop)
        base, bootstrap = args.database_url, args.bootstrap
        env = relay_env(url, bootstrap, prefix)
        env["OUTBOX_ACTIVE_REPLICAS"] = str(args.active_replicas)
        env["OUTBOX_LOG_LEVEL"] = "WARNING"
        env.update(item.split("=", 1) for item in args.env)
        if floor_gather is None:
            label = str(size)
            if gather is not None:
                env["OUTBOX_PROBE_GATHER_S"] = str(gather)
                label += f" gather {gather:g} s"
            launched = launch_relays(env, size, f"relay-{size}", logdir)
            procs += launched.values()
            ports = list(launched)
        else:
            label = f"floor {floor_gather:g} s" + (
                "" if floor_client == "aiokafka" else f" {floor_client}"
            )
            cmd = [sys.executable, "-m", "bench", "steady_floor", "--gather-s", str(floor_gather)]
            cmd += ["--client", floor_client]
            if floor_kind == "settle":
                label += " settle"
                cmd.append("--settle")
            name = f"floor-{floor_gather:g}-{floor_client}-{floor_kind}"
            procs.append(launch(name, cmd, env, logdir))
            ports = []

        async def arrived(wanted: range, timeout_s: float) -> dict[int, float]:
            return await appended(bootstrap, topic, args.partitions, wanted, timeout_s)

        seq = await warm_up(url, args.keys, procs[0], arrived)
        # Backends flush their statistics at most every 10 s when idle.
        await asyncio.sleep(12.0)
        cpu0, tx0, t0 = _cpu(procs), statements(base, dbname), time.monotonic()
        counted = _counters(ports)
        await asyncio.sleep(args.idle_s)
        elapsed = time.monotonic() - t0
        idle_counts = _rates(counted, _counters(ports), elapsed)
        idle_cpu = (_cpu(procs) - cpu0) / elapsed
        idle_tx = (statements(base, dbname) - tx0) / elapsed
        print(
            f"{label} idle: {idle_tx:.1f} transactions/s, relays' CPU "
            f"{idle_cpu * 100:.2f}% of a core (over {elapsed:.0f} s, load "
            f"{os.getloadavg()[0]:.2f}); {idle_counts}",
            flush=True,
        )
        marks: list[tuple[float, int, float]] = []
        counted = _counters(ports)
        commit_at, took = await asyncio.to_thread(
            load,
            args,
            url,
            args.rate,
            seq,
            False,
            lambda: marks.append((_cpu(procs), statements(base, dbname), time.monotonic())),
        )
        got = await arrived(range(seq, seq + len(commit_at)), 120)
        cpu1, tx1, t1 = marks[0]
        spent = time.monotonic() - t1
        steady_counts = _rates(counted, _counters(ports), took)
        steady_cpu = (_cpu(procs) - cpu1) / took
        steady_tx = (statements(base, dbname) - tx1) / spent
        lat, missing = latencies(commit_at, got, args.warmup_s)
        run = FleetRun(
            label,
            idle_tx,
            idle_cpu,
            steady_tx,
            steady_cpu,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            missing,
            os.getloadavg()[0],
        )
        print(
            f"{label} at {len(commit_at) / took:,.0f} events/s: relays' CPU "
            f"{steady_cpu * 100:.1f}% of a core, {steady_tx:,.0f} transactions/s (writer's "
            f"included), p50 {run.p50_ms:.1f} ms, p99 {run.p99_ms:.1f} ms, missing "
            f"{run.missing} (load {run.load_avg:.2f}); {steady_counts} (over the load's "
            f"{took:.0f} s, the drain after it included)",
            flush=True,
        )
        return run


async def run(args: argparse.Namespace) -> int:
    logdir = Path(args.logdir or f"/tmp/relay-fleet-{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    relays = [
        await one_fleet(args, size, logdir, gather=gather)
        for size in args.fleets
        for gather in args.gathers or [None]
    ]
    floors = [
        await one_fleet(args, 1, logdir, gather, client, kind)
        for kind in args.floor_kinds
        for client in args.floor_clients
        for gather in args.floor_gathers
    ]
    runs = [*relays, *floors]
    first = runs[0]
    print()
    print(
        f"active_replicas={args.active_replicas}, {args.rate:,.0f} events/s offered, "
        f"ratios against {first.label} relay(s)"
    )
    print(
        "| relays | idle tx/s | ratio | idle CPU | ratio | steady CPU | ratio | p50 ms | p99 ms "
        "| missing | load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        print(
            f"| {r.label} | {r.idle_tx_s:.1f} | {r.idle_tx_s / first.idle_tx_s:.2f} | "
            f"{r.idle_cpu * 100:.2f}% | {r.idle_cpu / first.idle_cpu:.2f} | "
            f"{r.steady_cpu * 100:.1f}% | {r.steady_cpu / first.steady_cpu:.2f} | "
            f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.missing} | {r.load_avg:.2f} |"
        )
    if floors:
        print()
        print(at_equal_latency(relays, floors))
    return 0


def at_equal_latency(relays: Sequence[FleetRun], floors: Sequence[FleetRun]) -> str:
    """Each relay run against the floor run of this run whose p99 is the nearest at or
    above the relay's, both within MAX_P99_MS: the relay's CPU over the floor's at no
    higher a latency."""
    lines = [
        f"Each relay against the floor with the nearest p99 at or above its own "
        f"(both at most {MAX_P99_MS:g} ms):",
        "| relays | p99 ms | CPU | floor | floor p99 ms | floor CPU | relay / floor |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in relays:
        fits = [f for f in floors if r.p99_ms <= f.p99_ms <= MAX_P99_MS]
        if not fits:  # none at or above the relay's p99 within the bar
            lines.append(f"| {r.label} | {r.p99_ms:.1f} | {r.steady_cpu * 100:.1f}% | none | | | |")
            continue
        f = min(fits, key=lambda f: f.p99_ms)
        lines.append(
            f"| {r.label} | {r.p99_ms:.1f} | {r.steady_cpu * 100:.1f}% | {f.label} | "
            f"{f.p99_ms:.1f} | {f.steady_cpu * 100:.1f}% | {r.steady_cpu / f.steady_cpu:.2f} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    add_load(p, rate=1500.0, seconds=60.0, warmup_s=2.0, writers=8)
    p.add_argument("--fleets", type=numbers(int), default=[1, 12])
    p.add_argument(
        "--gathers",
        type=numbers(float),
        default=[],
        help="run each fleet once with each of these probe_gather_s (default: the relay's "
        "own setting, once)",
    )
    p.add_argument(
        "--floor-gathers",
        type=numbers(float),
        default=[],
        help="after the fleets, bench/steady_floor.py's loop with each of these sleeps (s)",
    )
    p.add_argument(
        "--floor-clients",
        type=lambda s: [c for c in s.split(",") if c],
        default=["aiokafka"],
        help="the floor loop's Kafka clients, each run with every --floor-gathers "
        "(aiokafka, librdkafka: needs confluent-kafka)",
    )
    p.add_argument(
        "--floor-kinds",
        type=lambda s: [k for k in s.split(",") if k],
        default=["take"],
        help="the floor loops run: take (its rows deleted before the send) and settle "
        "(deleted after Kafka's ack: at least once, a second statement a cycle)",
    )
    p.add_argument("--active-replicas", type=int, default=1, help="OUTBOX_ACTIVE_REPLICAS")
    p.add_argument("--idle-s", type=float, default=30.0, help="idle time measured")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every relay, e.g. OUTBOX_PROBE_GATHER_S=0 (repeatable)",
    )
    add_logdir(p)
    args = p.parse_args(argv)
    check_services(p, args)
    if any(g < 0 for g in args.floor_gathers):
        p.error("--floor-gathers takes sleeps of 0 s or more")
    if any(not 0 <= g <= 1 for g in args.gathers):
        p.error("--gathers takes probe_gather_s values from 0 to 1 s")
    if not args.floor_clients or set(args.floor_clients) - {"aiokafka", "librdkafka"}:
        p.error("--floor-clients takes a comma list of aiokafka and librdkafka")
    if not args.floor_kinds or set(args.floor_kinds) - {"take", "settle"}:
        p.error("--floor-kinds takes a comma list of take and settle")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("relay_fleet", lambda: asyncio.run(run(args)))
