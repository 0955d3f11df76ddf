"""Failover under a steady load: the active replica of a fleet is SIGKILLed mid-load.

A private database and topic, as bench/relay_fleet.py: --replicas `outbox-relay run`
processes with OUTBOX_ACTIVE_REPLICAS=1 (one holds every shard and is the only one that
probes, claims and settles; the others stand by), --rate events/s for --seconds, one event
per transaction (the latency benchmark's pgbench writer). --kill-at seconds into the load,
the replica whose /metrics says `outbox_relay_active 1` is SIGKILLed; a standby takes its
shards once their leases expire (--lease-ttl-s).

Commit-to-Kafka latency per event (the broker's LogAppendTime minus Postgres's commit
timestamp) is grouped in --window-s windows by commit time. Printed: the p99 of the
events committed before the kill (the same run's baseline), each window's p99 after it,
the longest latency, how long after the kill every later window's p99 is back under
--bar-ms and under twice the p99 before the kill (on a loaded machine only the second
means anything), and the events missing from the topic (must be 0).

    .venv/bin/python bench/relay_failover.py [--replicas 3] [--rate 1500] [--seconds 40]
        [--kill-at 10] [--lease-ttl-s 10]

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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare.latency import percentile  # noqa: E402
from bench.compare.processes import Proc, relay_env  # noqa: E402
from bench.compare.topics import create_topic, delete_topics  # noqa: E402
from bench.database import admin, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.orders import TOPIC  # noqa: E402
from bench.relay_fleet import launch_relays, warm_up  # noqa: E402
from bench.relay_latency import appended, load  # noqa: E402
from outbox_core.migrate import migrate  # noqa: E402


def active_port(ports: list[int]) -> int | None:
    """The port of the replica that reports itself active (holds shards), if one does."""
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        if any(line.split() == ["outbox_relay_active", "1.0"] for line in text.splitlines()):
            return port
    return None


async def kill_active(procs: dict[int, Proc], after_s: float, killed: list[float]) -> None:
    await asyncio.sleep(after_s)
    port = await asyncio.to_thread(active_port, list(procs))
    if port is None:
        raise RuntimeError("no replica reports itself active")
    procs[port].popen.kill()
    killed.append(time.time())
    print(f"SIGKILLed {procs[port].name} (the active replica) at {after_s:.0f} s", flush=True)


async def run(args: argparse.Namespace) -> int:
    base = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    logdir = Path(args.logdir or f"/tmp/relay-failover-{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    dbname, prefix = f"bench_failover_{run_id}", f"bench-failover-{run_id}."
    topic = prefix + TOPIC
    url = with_database(base, dbname)
    admin(base, "bench_database_create", dbname)
    procs: dict[int, Proc] = {}
    try:
        migrate(url)
        await create_topic(
            bootstrap, topic, args.partitions, {"message.timestamp.type": "LogAppendTime"}
        )
        env = relay_env(url, bootstrap, prefix)
        env.update(
            OUTBOX_ACTIVE_REPLICAS="1",
            OUTBOX_LEASE_TTL_S=str(args.lease_ttl_s),
            # The default (2 s) unless a short lease needs renewals more often than that.
            OUTBOX_HEARTBEAT_INTERVAL_S=str(min(2.0, args.lease_ttl_s / 4)),
            OUTBOX_LOG_LEVEL="WARNING",
        )
        procs = launch_relays(env, args.replicas, "relay", logdir)
        seq = await warm_up(url, bootstrap, topic, args.partitions, args.keys, list(procs.values()))
        killed: list[float] = []
        started = asyncio.Event()
        loop = asyncio.get_running_loop()
        loading = asyncio.create_task(
            asyncio.to_thread(
                load,
                args,
                url,
                args.rate,
                seq,
                False,
                lambda: loop.call_soon_threadsafe(started.set),
            )
        )
        # The writers' rows are staged and the load begins (or the load failed first).
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({loading, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if loading.done():
            await loading  # its error
        await kill_active(procs, args.kill_at, killed)
        commit_at, took = await loading
        wanted = range(seq, seq + len(commit_at))
        got = await appended(bootstrap, topic, args.partitions, wanted, 120 + 2 * args.lease_ttl_s)
    finally:
        for p in procs.values():
            p.stop()
        await delete_topics(bootstrap, [topic])
        admin(base, "bench_database_drop", dbname)

    kill = killed[0]
    counted_from = min(commit_at.values()) + args.warmup_s
    before = sorted(
        (got[s] - at) * 1000
        for s, at in commit_at.items()
        if counted_from <= at < kill and s in got
    )
    windows: dict[int, list[float]] = {}
    for s, at in commit_at.items():
        if at >= kill and s in got:
            windows.setdefault(int((at - kill) // args.window_s), []).append((got[s] - at) * 1000)
    p99s = {w: percentile(sorted(lat), 0.99) for w, lat in sorted(windows.items())}
    base_p99 = percentile(before, 0.99)

    def back_under(limit_ms: float) -> float:
        over = [w for w, p in p99s.items() if p > limit_ms]
        return (max(over) + 1) * args.window_s if over else 0.0

    back_after = back_under(args.bar_ms)
    back_to_base = back_under(2 * base_p99)
    longest = max((lat for lats in windows.values() for lat in lats), default=0.0)
    missing = sum(1 for s in wanted if s not in got)
    print(
        f"{len(commit_at) / took:,.0f} events/s offered over {took:.0f} s, {args.replicas} "
        f"replicas, lease_ttl_s {args.lease_ttl_s:g}, load {os.getloadavg()[0]:.2f}"
    )
    print(f"before the kill: p50 {percentile(before, 0.5):.1f} ms, p99 {base_p99:.1f} ms")
    print(
        "after the kill, p99 per window (s: ms): "
        + ", ".join(f"{w * args.window_s:g}: {p:.0f}" for w, p in p99s.items())
    )
    print(
        f"longest commit-to-Kafka after the kill {longest / 1000:.2f} s; every window's p99 "
        f"under {args.bar_ms:g} ms from {back_after:g} s after the kill "
        f"({back_after / args.lease_ttl_s:.2f} x lease_ttl_s), under twice the p99 before "
        f"the kill from {back_to_base:g} s ({back_to_base / args.lease_ttl_s:.2f} x); "
        f"missing {missing}"
    )
    return 1 if missing else 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--replicas", type=int, default=3, help="relay processes")
    p.add_argument("--rate", type=float, default=1500.0, help="offered events/s")
    p.add_argument("--seconds", type=float, default=40.0, help="length of the load")
    p.add_argument("--kill-at", type=float, default=10.0, help="seconds into the load")
    p.add_argument("--lease-ttl-s", type=float, default=10.0, help="OUTBOX_LEASE_TTL_S")
    p.add_argument("--window-s", type=float, default=1.0, help="latency windows")
    p.add_argument("--bar-ms", type=float, default=25.0, help="the p99 bar")
    p.add_argument("--warmup-s", type=float, default=2.0, help="left out at the load's start")
    p.add_argument("--writers", type=int, default=8, help="writer connections (pgbench)")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--logdir", help="where the relays' logs go (default a /tmp folder)")
    args = p.parse_args(argv)
    if args.kill_at >= args.seconds:
        p.error("--kill-at must fall inside the load (--seconds)")
    args.writer, args.processes = "pgbench", 1  # what relay_latency.load reads
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("relay_failover", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
