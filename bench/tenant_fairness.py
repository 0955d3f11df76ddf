"""Fair turns between tenants: does one tenant's backlog delay another's events?

Tenant A has a backlog of --events events (loaded in bulk with bench/sql/tenant_fairness.sql,
tenant 'A', 1,000 keys); tenant B commits --rate events a second, one per transaction,
through producer_lib (tenant 'B', keys of its own), while `outbox-relay run` (defaults
otherwise) drains A's backlog. Each tenant's events go to a topic of their own whose
records the broker stamps when it appends them (LogAppendTime). B's latency is the
broker's append time minus the writer's commit time (one clock: the same machine); A's
drain rate is A's events over the time from the first to the last append of them.

Each configuration gets a private database and topics, in one process run:

- idle: B alone on an idle relay with fair turns on (B's baseline latency);
- alone: A alone, fair turns off (A's baseline drain rate);
- alone-fair: A alone, fair turns on (what the fair claim costs by itself);
- fair: A's backlog and B together, fair turns on;
- plain: the same with fair turns off (B waits behind A's backlog);
- fair-cap: fair with tenant_max_rows=--cap (shorter cycles: B waits less, A drains slower);
- apart: A's backlog and B together, but in two databases (on the same server), each with a
  relay of its own: B shares no claim, cycle, connection or process with A, only the
  machine's cores, the Postgres server and the broker. No scheduling of turns inside one
  relay can isolate B better, so B's p99 here is the floor fair turns can reach on this
  machine, and A's rate the ceiling it can keep beside B.

B starts once A's first events are on the topic and stops when all of A's are (in idle,
after --idle-s). Ratios printed: B's p99 in fair / in idle, A's rate in fair / in alone
(and / alone-fair). --plot draws B's latency over time for idle, fair and plain.

    .venv/bin/python -m bench tenant_fairness [--events 500000] [--rate 100]
        [--configs idle,alone,alone-fair,fair,plain,fair-cap] [--cap 50]
        [--plot docs/img/tenant_fairness.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.shared.cli import add_logdir, add_services, check_services, parser, run_guarded
from bench.shared.database import load_sql, private_database
from bench.shared.orders import make_orders, order_payload
from bench.shared.processes import Proc, launch, poll_until, relay_env
from bench.shared.steady import appended, percentile
from bench.shared.topics import (
    APPEND_TIME,
    TopicCounter,
    private_topic,
)
from outbox_core.sharding import shard_for
from producer_lib import Outbox

Q = load_sql("tenant_fairness.sql")
SHARD_COUNT = 16  # what migrate records by default, and the relay's default
A_KEYS = 1000
B_KEYS = 50
LOAD_CHUNK = 50_000


@dataclass(frozen=True)
class Config:
    name: str
    backlog: bool  # A's backlog is loaded and drained
    writer: bool  # B commits during the run
    fair: bool  # OUTBOX_FAIR_TENANTS
    capped: bool = False  # OUTBOX_TENANT_MAX_ROWS=--cap
    apart: bool = False  # B in a database of its own, drained by a relay of its own


CONFIGS = {
    c.name: c
    for c in (
        Config("idle", backlog=False, writer=True, fair=True),
        Config("alone", backlog=True, writer=False, fair=False),
        Config("alone-fair", backlog=True, writer=False, fair=True),
        Config("fair", backlog=True, writer=True, fair=True),
        Config("plain", backlog=True, writer=True, fair=False),
        Config("fair-cap", backlog=True, writer=True, fair=True, capped=True),
        Config("apart", backlog=True, writer=True, fair=False, apart=True),
    )
}


@dataclass
class Result:
    config: Config
    load_s: float = 0.0
    a_events: int = 0
    a_span_s: float = float("nan")
    b_latency_ms: list[float] = field(default_factory=list)  # sorted
    b_timeline: list[tuple[float, float]] = field(default_factory=list)  # (s since start, ms)
    b_committed: int = 0
    b_missing: int = 0
    load_avg: float = 0.0

    @property
    def a_rate(self) -> float:
        return (self.a_events - 1) / self.a_span_s if self.a_events > 1 else float("nan")

    def b(self, q: float) -> float:
        return percentile(self.b_latency_ms, q)


def load_backlog(url: str, topic: str, events: int) -> float:
    """A's backlog, in chunks of one statement and transaction each; returns seconds."""
    keys = [f"tenant-a-customer-{i:04d}" for i in range(A_KEYS)]
    shards = [shard_for(k, SHARD_COUNT) for k in keys]
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(0, events, LOAD_CHUNK):
            conn.execute(
                Q["backlog_load"],
                {
                    "topic": topic,
                    "tenant": "A",
                    "first": first,
                    "last": min(events, first + LOAD_CHUNK) - 1,
                    "keys": keys,
                    "shards": shards,
                    "key_count": A_KEYS,
                },
            )
        took = time.monotonic() - started
        conn.execute(Q["outbox_vacuum_analyze"])
        conn.execute(Q["server_checkpoint"])
    return took


class Writer:
    """Tenant B: one event per transaction at `rate`/s on its own connection, in a thread,
    until stopped; the wall clock right after each COMMIT, by seq."""

    def __init__(self, url: str, topic: str, rate: float) -> None:
        self._url, self._topic, self._rate = url, topic, rate
        self._stop = threading.Event()
        self.commit_at: list[float] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def abandon(self) -> None:
        """Stop without waiting (the run failed)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        orders = make_orders(random.Random(7), 500)
        outbox = Outbox()
        try:
            with psycopg.connect(self._url) as conn:
                start = time.time()
                seq = 0
                while not self._stop.is_set():
                    delay = start + seq / self._rate - time.time()
                    if delay > 0:
                        self._stop.wait(delay)
                        continue
                    outbox.emit(
                        conn,
                        topic=self._topic,
                        key=f"tenant-b-customer-{seq % B_KEYS:02d}",
                        event_type="OrderPlaced",
                        payload={"seq": seq, **order_payload(seq, orders[seq % len(orders)])},
                        tenant="B",
                    )
                    conn.commit()
                    self.commit_at.append(time.time())
                    seq += 1
        except BaseException as exc:  # reported by stop()
            self.error = exc


async def edge_append_times(
    bootstrap: str, topic: str, partitions: int
) -> tuple[int, float, float]:
    """(records, first append time, last append time) of a topic, from the first and the
    last record of each partition (LogAppendTime, seconds)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        first, last = float("inf"), float("-inf")
        for tp in tps:
            if ends[tp] <= begins[tp]:
                continue
            for offset in (begins[tp], ends[tp] - 1):
                consumer.seek(tp, offset)
                record = await asyncio.wait_for(consumer.getone(tp), 30)
                first = min(first, record.timestamp / 1000)
                last = max(last, record.timestamp / 1000)
        return sum(ends[tp] - begins[tp] for tp in tps), first, last
    finally:
        await consumer.stop()


async def run_config(args: argparse.Namespace, config: Config, run_id: str) -> Result:
    base, bootstrap = args.database_url, args.bootstrap
    tag = config.name.replace("-", "_")
    prefix = f"bench-fair-{run_id}-{tag}."
    a_topic, b_topic = prefix + "a-orders", prefix + "b-orders"
    logdir = Path(args.logdir or f"/tmp/tenant-fairness-{run_id}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    result = Result(config)
    relays: list[Proc] = []
    writer: Writer | None = None
    async with contextlib.AsyncExitStack() as stack:
        # apart: B's database and relay of their own.
        urls = [
            stack.enter_context(private_database(base, f"bench_fair_{tag}"))[0]
            for _ in range(2 if config.apart else 1)
        ]
        url, b_url = urls[0], urls[-1]
        for topic in (a_topic, b_topic):
            await stack.enter_async_context(
                private_topic(bootstrap, topic, args.partitions, APPEND_TIME)
            )

        def stop() -> None:
            if writer is not None:
                writer.abandon()
            for proc in relays:
                proc.stop()

        stack.callback(stop)
        if config.backlog:
            result.load_s = await asyncio.to_thread(load_backlog, url, "a-orders", args.events)
            print(f"  {config.name}: loaded {args.events:,} events in {result.load_s:.1f} s")
        for n, db_url in enumerate(urls):
            env = relay_env(db_url, bootstrap, prefix)
            env["OUTBOX_FAIR_TENANTS"] = "true" if config.fair else "false"
            if config.capped:
                env["OUTBOX_TENANT_MAX_ROWS"] = str(args.cap)
            for pair in args.relay_env:
                setting, _, value = pair.partition("=")
                env[setting] = value
            cmd = [sys.executable, "-m", "relay.cli", "run"]
            relays.append(launch(f"relay-{tag}" + "-b" * n, cmd, env, logdir))
        relay = relays[0]  # A's
        async with TopicCounter(bootstrap, a_topic, args.partitions) as a_count:

            async def reached(count: int) -> bool:
                # Seldom: each count is a request to the broker the drain is measured on.
                return await a_count.count() >= count

            if config.backlog:
                # B starts once the drain is under way, and stops when it is over.
                await poll_until(
                    lambda: reached(min(1000, args.events)), relay, 120, "drain start", 0.2
                )
            if config.writer:
                writer = Writer(b_url, "b-orders", args.rate)
                writer.start()
            if config.backlog:
                await poll_until(
                    lambda: reached(args.events), relay, args.timeout_s, "drain end", 0.2
                )
            else:
                await asyncio.sleep(args.idle_s)
            if writer is not None:
                await asyncio.to_thread(writer.stop)
        result.load_avg = os.getloadavg()[0]
        if config.backlog:
            result.a_events, first, last = await edge_append_times(
                bootstrap, a_topic, args.partitions
            )
            result.a_span_s = last - first
        if writer is not None:
            commit_at = writer.commit_at
            result.b_committed = len(commit_at)
            got = (  # (aiokafka's consumer fails to stop when it was asked for nothing)
                await appended(bootstrap, b_topic, args.partitions, range(len(commit_at)), 120)
                if commit_at
                else {}
            )
            result.b_missing = sum(1 for s in range(len(commit_at)) if s not in got)
            t0 = commit_at[0] if commit_at else 0.0
            skip = int(args.rate * args.warmup_s) if not config.backlog else 0
            for seq in range(skip, len(commit_at)):
                if seq in got:
                    ms = (got[seq] - commit_at[seq]) * 1000
                    result.b_latency_ms.append(ms)
                    result.b_timeline.append((commit_at[seq] - t0, ms))
            result.b_latency_ms.sort()
        return result


def _fmt(value: float, spec: str = ",.1f") -> str:
    return "" if value != value else format(value, spec)  # NaN: not measured


def report(results: list[Result], args: argparse.Namespace) -> None:
    print()
    print(
        "| config | fair turns | A events | A drain s | A events/s | B events | B p50 ms "
        "| B p99 ms | B max ms | B missing | load avg |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        c = r.config
        turns = ("on" if c.fair else "off") + (f", tenant_max_rows {args.cap}" if c.capped else "")
        print(
            f"| {c.name} | {turns} | "
            f"{_fmt(float(r.a_events), ',.0f') if c.backlog else ''} | "
            f"{_fmt(r.a_span_s) if c.backlog else ''} | "
            f"{_fmt(r.a_rate, ',.0f') if c.backlog else ''} | "
            f"{r.b_committed if c.writer else ''} | "
            f"{_fmt(r.b(0.5)) if c.writer else ''} | {_fmt(r.b(0.99)) if c.writer else ''} | "
            f"{_fmt(r.b_latency_ms[-1]) if r.b_latency_ms else ''} | "
            f"{r.b_missing if c.writer else ''} | {r.load_avg:.1f} |"
        )
    by = {r.config.name: r for r in results}
    print()
    if "fair" in by and "idle" in by:
        ratio = by["fair"].b(0.99) / by["idle"].b(0.99)
        print(f"B p99 fair / B p99 idle: {ratio:.2f} (bar: <= 2)")
    if "plain" in by and "idle" in by:
        print(f"B p99 plain / B p99 idle: {by['plain'].b(0.99) / by['idle'].b(0.99):.1f}")
    for baseline in ("alone", "alone-fair"):
        if "fair" in by and baseline in by:
            ratio = by["fair"].a_rate / by[baseline].a_rate
            print(f"A rate fair / A rate {baseline}: {ratio:.2f} (bar: >= 0.9)")
    for name in ("plain", "fair-cap"):
        if name in by and "alone" in by:
            print(f"A rate {name} / A rate alone: {by[name].a_rate / by['alone'].a_rate:.2f}")
    if "fair-cap" in by and "idle" in by:
        ratio = by["fair-cap"].b(0.99) / by["idle"].b(0.99)
        print(f"B p99 fair-cap / B p99 idle: {ratio:.1f}")
    if "fair" in by and "apart" in by:
        ratio = by["fair"].b(0.99) / by["apart"].b(0.99)
        print(f"B p99 fair / B p99 apart: {ratio:.2f} (bar: <= 1.5)")
    if "apart" in by and "idle" in by:
        ratio = by["apart"].b(0.99) / by["idle"].b(0.99)
        print(f"B p99 apart / B p99 idle: {ratio:.2f} (the floor on this machine)")
    if "apart" in by and "alone" in by:
        ratio = by["apart"].a_rate / by["alone"].a_rate
        print(f"A rate apart / A rate alone: {ratio:.2f} (the ceiling on this machine)")
    if args.plot:
        from bench.shared.plot import timeline_plot

        series = [
            (f"B {name}", by[name].b_timeline)
            for name in ("idle", "fair", "plain", "fair-cap", "apart")
            if name in by
        ]
        reference = None
        if "idle" in by:
            bar = 2 * by["idle"].b(0.99)
            reference = (f"2 x idle p99 = {bar:.0f} ms", bar)
        written = timeline_plot(
            Path(args.plot),
            series,
            f"Tenant B at {args.rate:g}/s while A drains {args.events:,}",
            reference=reference,
        )
        print("plot: " + ", ".join(map(str, written)))


async def run(args: argparse.Namespace) -> int:
    run_id = uuid.uuid4().hex[:8]
    results: list[Result] = []
    for name in args.configs:
        config = CONFIGS[name]
        print(f"{name}: ...", flush=True)
        result = await run_config(args, config, run_id)
        results.append(result)
        line = f"{name}: load avg {result.load_avg:.1f}"
        if config.backlog:
            line += f", A {result.a_events:,} in {result.a_span_s:.1f} s = {result.a_rate:,.0f}/s"
        if config.writer:
            line += (
                f", B {result.b_committed} events p50 {result.b(0.5):.1f} ms "
                f"p99 {result.b(0.99):.1f} ms, missing {result.b_missing}"
            )
        print(line, flush=True)
    report(results, args)
    print(json.dumps({"events": args.events, "rate": args.rate, "configs": args.configs}))
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    p.add_argument("--events", type=int, default=500_000, help="tenant A's backlog")
    p.add_argument("--rate", type=float, default=100.0, help="tenant B's commits per second")
    p.add_argument(
        "--configs",
        type=lambda s: s.split(","),
        default=list(CONFIGS),
        help=f"which of {','.join(CONFIGS)}, in this order",
    )
    p.add_argument("--cap", type=int, default=50, help="tenant_max_rows of fair-cap")
    p.add_argument("--idle-s", type=float, default=20.0, help="length of the idle run")
    p.add_argument("--warmup-s", type=float, default=1.0, help="left out of the idle run")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--timeout-s", type=float, default=900.0, help="longest drain")
    p.add_argument(
        "--relay-env",
        action="append",
        default=[],
        metavar="OUTBOX_NAME=VALUE",
        help="a setting for every configuration's relay (repeatable)",
    )
    p.add_argument("--plot", help="write B's latency over time here (.svg and .png)")
    add_logdir(p)
    args = p.parse_args(argv)
    check_services(p, args)
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configs: {unknown}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("tenant_fairness", lambda: asyncio.run(run(args)))
