"""What a fleet of relays costs against one relay, on one database: idle, and at a steady load.

A private database and topic, as bench/relay_latency.py. For each fleet size (--fleets,
default 1 and 12), that many `outbox-relay run` processes start on the database with
--active-replicas (OUTBOX_ACTIVE_REPLICAS, default 1: one replica holds the shards, the
others stand by); a warm-up is delivered, then:

- idle: for --idle-s, the database's transactions per second (pg_stat_database
  xact_commit + xact_rollback deltas of the bench database; every relay statement is its
  own transaction) and the relays' CPU, all processes together (/proc);
- steady: --rate events/s for --seconds, one event per transaction (bench/pgbench_writer.py,
  the latency benchmark's writer), commit-to-Kafka latency per event (the broker's
  LogAppendTime minus Postgres's commit timestamp: the first moment a consumer can see
  the event) and the relays' CPU over the load.

Every figure is printed with its ratio to the first fleet of the run (the baseline), and
the load average, since only ratios of one run mean anything on a shared machine.

    .venv/bin/python bench/relay_fleet.py [--fleets 1,12] [--idle-s 30] [--rate 1500]
        [--seconds 60] [--active-replicas 1]

Needs DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS (`eval "$(scripts/services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare.latency import percentile  # noqa: E402
from bench.compare.processes import Proc, launch, relay_env  # noqa: E402
from bench.compare.topics import create_topic, delete_topics  # noqa: E402
from bench.database import admin, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.orders import TOPIC  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from bench.relay_latency import appended, load, statements, write_load  # noqa: E402
from outbox_core.migrate import migrate  # noqa: E402
from scripts.ports import reserved_port  # noqa: E402


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


async def warm_up(
    url: str, bootstrap: str, topic: str, partitions: int, keys: int, procs: list[Proc]
) -> int:
    """Two seconds of 50 events/s, delivered before anything is measured: the next seq."""
    warm, _ = await asyncio.to_thread(write_load, url, 50, 2.0, 1, 0, keys)
    got = await appended(bootstrap, topic, partitions, range(len(warm)), 120)
    if len(got) < len(warm):
        raise RuntimeError(f"the fleet did not deliver the warm-up:\n{procs[0].tail()}")
    return len(warm)


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
    base: str,
    bootstrap: str,
    size: int,
    logdir: Path,
    floor_gather: float | None = None,
    floor_client: str = "aiokafka",
) -> FleetRun:
    """size relays, or with floor_gather bench/steady_floor.py's loop sleeping that long
    on floor_client."""
    run_id = uuid.uuid4().hex[:8]
    dbname, prefix = f"bench_fleet_{run_id}", f"bench-fleet-{run_id}."
    topic = prefix + TOPIC
    url = with_database(base, dbname)
    admin(base, "bench_database_create", dbname)
    procs: list[Proc] = []
    try:
        migrate(url)
        await create_topic(
            bootstrap, topic, args.partitions, {"message.timestamp.type": "LogAppendTime"}
        )
        env = relay_env(url, bootstrap, prefix)
        env["OUTBOX_ACTIVE_REPLICAS"] = str(args.active_replicas)
        env["OUTBOX_LOG_LEVEL"] = "WARNING"
        env.update(item.split("=", 1) for item in args.env)
        if floor_gather is None:
            label = str(size)
            launched = launch_relays(env, size, f"relay-{size}", logdir)
            procs, ports = list(launched.values()), list(launched)
        else:
            label = f"floor {floor_gather:g} s" + (
                "" if floor_client == "aiokafka" else f" {floor_client}"
            )
            cmd = [sys.executable, "-m", "bench.steady_floor", "--gather-s", str(floor_gather)]
            cmd += ["--client", floor_client]
            procs, ports = [launch(f"floor-{floor_gather:g}-{floor_client}", cmd, env, logdir)], []
        seq = await warm_up(url, bootstrap, topic, args.partitions, args.keys, procs)
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
        wanted = range(seq, seq + len(commit_at))
        got = await appended(bootstrap, topic, args.partitions, wanted, 120)
        cpu1, tx1, t1 = marks[0]
        spent = time.monotonic() - t1
        steady_counts = _rates(counted, _counters(ports), took)
        steady_cpu = (_cpu(procs) - cpu1) / took
        steady_tx = (statements(base, dbname) - tx1) / spent
        counted_from = min(commit_at.values()) + args.warmup_s
        lat = sorted(
            (got[s] - at) * 1000 for s, at in commit_at.items() if at >= counted_from and s in got
        )
        run = FleetRun(
            label,
            idle_tx,
            idle_cpu,
            steady_tx,
            steady_cpu,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            sum(1 for s in wanted if s not in got),
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
    finally:
        for p in procs:
            p.stop()
        await delete_topics(bootstrap, [topic])
        admin(base, "bench_database_drop", dbname)


async def run(args: argparse.Namespace) -> int:
    base = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    logdir = Path(args.logdir or f"/tmp/relay-fleet-{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    runs = [await one_fleet(args, base, bootstrap, size, logdir) for size in args.fleets]
    for client in args.floor_clients:
        for gather in args.floor_gathers:
            runs.append(await one_fleet(args, base, bootstrap, 1, logdir, gather, client))
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
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--fleets", type=lambda s: [int(x) for x in s.split(",")], default=[1, 12])
    p.add_argument(
        "--floor-gathers",
        type=lambda s: [float(x) for x in s.split(",") if x],
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
    p.add_argument("--active-replicas", type=int, default=1, help="OUTBOX_ACTIVE_REPLICAS")
    p.add_argument("--idle-s", type=float, default=30.0, help="idle time measured")
    p.add_argument("--rate", type=float, default=1500.0, help="offered events/s")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the steady load")
    p.add_argument("--warmup-s", type=float, default=2.0, help="left out at the load's start")
    p.add_argument("--writers", type=int, default=8, help="writer connections (pgbench)")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every relay, e.g. OUTBOX_PROBE_GATHER_S=0 (repeatable)",
    )
    p.add_argument("--logdir", help="where the relays' logs go (default a /tmp folder)")
    args = p.parse_args(argv)
    if any(g < 0 for g in args.floor_gathers):
        p.error("--floor-gathers takes sleeps of 0 s or more")
    if not args.floor_clients or set(args.floor_clients) - {"aiokafka", "librdkafka"}:
        p.error("--floor-clients takes a comma list of aiokafka and librdkafka")
    args.writer, args.processes = "pgbench", 1  # what relay_latency.load reads
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("relay_fleet", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
