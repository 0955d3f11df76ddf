"""Commit-to-Kafka latency of the relay with its default settings, one event per transaction.

A private database and a topic whose records the broker stamps when it appends them
(message.timestamp.type=LogAppendTime). `outbox-relay run` works on it with every setting
at its default. Writer threads (spread over --processes processes), each on its own
connection, commit one event per transaction at the offered rate (split evenly between
them), and note the wall clock right after each COMMIT returned; each event's payload
carries its sequence number. The default writer (--writer pgbench, bench/pgbench_writer.py)
inserts rows producer_lib built beforehand from pgbench, one event per transaction in one
round trip, so the load generator leaves the two cores to the relay, Postgres and Kafka;
--writer emit runs Outbox.emit and COMMIT in Python threads instead. The latency
of an event is the broker's append time minus its commit time (one clock: the same
machine). The first --warmup-s of each load are left out. Before the loads, the relay sits
idle for --idle-s: what that costs (statements per second on its database, CPU seconds of
the relay and of Postgres per second) is measured too.

    .venv/bin/python bench/relay_latency.py [--rates 500,2000,5000] [--seconds 10]
        [--writers 16] [--processes 4] [--writer pgbench|emit] [--plot docs/img/relay_latency.png] [--transport redis]

Needs DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS (`eval "$(scripts/services env)"`). With
--transport redis the relay publishes to a Redis stream instead (REDIS_URL), and the append
time is the time in the entry id Redis assigns on XADD (its clock: the same machine's).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import pgbench_writer  # noqa: E402
from bench.compare.latency import percentile  # noqa: E402
from bench.compare.processes import launch, relay_env  # noqa: E402
from bench.compare.topics import create_topic, delete_topics  # noqa: E402
from bench.database import admin, load_sql, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.orders import TOPIC, make_orders, sequenced_order_event  # noqa: E402
from bench.procstat import cpu_seconds  # noqa: E402
from outbox_core.migrate import migrate  # noqa: E402
from producer_lib import Outbox  # noqa: E402

Q = load_sql("relay_latency.sql")


@dataclass
class Point:
    offered: float
    achieved: float
    measured: int
    missing: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def _write_share(
    url: str,
    rate: float,
    total: int,
    writers: int,
    mine: list[int],
    first_seq: int,
    keys: int,
    start: float,
) -> list[tuple[int, float]]:
    """The writers numbered `mine` (threads of this process): each commits events
    w, w + writers, ... on its own connection, paced by the wall clock from `start`."""
    orders = make_orders(random.Random(first_seq), 500)
    outbox = Outbox()
    done: list[tuple[int, float]] = []
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rng = random.Random(first_seq + w)
        try:
            with psycopg.connect(url) as conn:
                for i in range(w, total, writers):
                    delay = start + i / rate - time.time()
                    if delay > 0:
                        time.sleep(delay)
                    event = sequenced_order_event(rng, keys, first_seq + i, orders[i % len(orders)])
                    outbox.emit(
                        conn,
                        topic=event.topic,
                        key=event.key,
                        event_type=event.event_type,
                        payload=event.payload,
                    )
                    conn.commit()
                    done.append((i, time.time()))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in mine]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return done


def write_load(
    url: str,
    rate: float,
    seconds: float,
    writers: int,
    first_seq: int,
    keys: int,
    processes: int = 1,
) -> tuple[list[float], float]:
    """Commit int(rate * seconds) events, one per transaction, from `writers` threads
    spread over `processes` processes (one GIL cannot drive thousands of commits a second);
    returns each event's commit time (by seq - first_seq) and the elapsed time."""
    total = int(rate * seconds)
    commit_at = [0.0] * total
    start = time.time() + 0.5
    shares = [list(range(p, writers, processes)) for p in range(min(processes, writers))]
    if len(shares) == 1:
        results = [_write_share(url, rate, total, writers, shares[0], first_seq, keys, start)]
    else:
        with concurrent.futures.ProcessPoolExecutor(len(shares)) as pool:
            futures = [
                pool.submit(_write_share, url, rate, total, writers, mine, first_seq, keys, start)
                for mine in shares
            ]
            results = [f.result() for f in futures]
    for done in results:
        for i, at in done:
            commit_at[i] = at
    return commit_at, time.time() - start


async def appended(
    bootstrap: str, topic: str, partitions: int, wanted: range, timeout_s: float
) -> dict[int, float]:
    """seq -> broker append time (s) of every wanted event found on the topic."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    found: dict[int, float] = {}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(s in found for s in wanted):
            batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for records in batches.values():
                for rec in records:
                    seq = int(json.loads(rec.value)["seq"])
                    if seq in wanted:
                        found.setdefault(seq, rec.timestamp / 1000)
    finally:
        await consumer.stop()
    return found


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


def load(
    args: argparse.Namespace,
    url: str,
    rate: float,
    first_seq: int,
    unthrottled: bool = False,
    starting: Callable[[], object] = lambda: None,
) -> tuple[dict[int, float], float]:
    """One load of args.seconds at rate: seq -> commit time, and the time it took.
    unthrottled: the writers commit as fast as they can (pgbench only). starting is
    called just before the first write (after the rows are staged)."""
    if args.writer == "emit":
        starting()
        commit_at, took = write_load(
            url, rate, args.seconds, args.writers, first_seq, args.keys, args.processes
        )
        return {first_seq + i: at for i, at in enumerate(commit_at)}, took
    total = int(rate * args.seconds) // args.writers * args.writers
    orders = make_orders(random.Random(first_seq), 500)
    rng = random.Random(first_seq)
    events = (
        (
            first_seq + i,
            sequenced_order_event(rng, args.keys, first_seq + i, orders[i % len(orders)]),
        )
        for i in range(total)
    )
    pgbench_writer.stage(url, events)
    starting()
    committed = pgbench_writer.write(
        url, None if unthrottled else rate, total, args.writers, first_seq
    )
    return committed, max(committed.values()) - min(committed.values())


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


def statements(url: str, dbname: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(Q["database_transactions"], {"dbname": dbname}).fetchone()
    return int(row[0]) if row else 0


async def run(args: argparse.Namespace) -> int:
    base = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    redis_url = os.environ.get("REDIS_URL", "") if args.transport == "redis" else ""
    run_id = uuid.uuid4().hex[:8]
    dbname, prefix = f"bench_latency_{run_id}", f"bench-latency-{run_id}."
    topic = prefix + TOPIC
    url = with_database(base, dbname)
    logdir = Path(args.logdir or f"/tmp/relay-latency-{run_id}")
    await asyncio.to_thread(logdir.mkdir, parents=True, exist_ok=True)
    admin(base, "bench_database_create", dbname)
    relay = None

    async def arrived(wanted: range, timeout_s: float) -> dict[int, float]:
        if redis_url:
            return await appended_redis(redis_url, topic, wanted, timeout_s)
        return await appended(bootstrap, topic, args.partitions, wanted, timeout_s)

    try:
        migrate(url)
        env = relay_env(url, bootstrap, prefix)
        if redis_url:
            env.update(OUTBOX_TRANSPORT="redis", OUTBOX_REDIS_URL=redis_url)
        else:
            await create_topic(
                bootstrap, topic, args.partitions, {"message.timestamp.type": "LogAppendTime"}
            )
        relay = launch("relay", [sys.executable, "-m", "relay.cli", "run"], env, logdir)
        pid = relay.pid
        seq = 0
        warm, _ = await asyncio.to_thread(write_load, url, 50, 2.0, 1, seq, args.keys)
        got = await arrived(range(seq, seq + len(warm)), 120)
        if len(got) < len(warm):
            raise RuntimeError(f"the relay did not deliver the warm-up:\n{relay.tail()}")
        seq += len(warm)
        # Postgres backends flush their statistics at most every 10 s when idle: wait that
        # out, so the warm-up's statements are not counted as the idle relay's.
        await asyncio.sleep(12.0)
        cpu0, pg0, tx0, t0 = (
            cpu_seconds(relay.pid) or 0.0,
            postgres_cpu(dbname),
            statements(base, dbname),
            time.monotonic(),
        )
        await asyncio.sleep(args.idle_s)
        elapsed = time.monotonic() - t0
        idle_cpu = ((cpu_seconds(relay.pid) or 0.0) - cpu0) / elapsed
        idle_pg = (postgres_cpu(dbname) - pg0) / elapsed
        idle_tx = (statements(base, dbname) - tx0) / elapsed
        print(
            f"idle relay: {idle_tx:.0f} statements/s on its database, relay CPU "
            f"{idle_cpu * 100:.1f}% of a core, Postgres CPU {idle_pg * 100:.1f}% of a core "
            f"(over {elapsed:.0f} s)",
            flush=True,
        )
        if args.writer == "pgbench" and args.ceiling_events:
            # What this machine can commit at all, one event per transaction, while the
            # relay publishes them: the offered rates above it cannot be met by any relay.
            commit_at, took = await asyncio.to_thread(
                load, args, url, args.ceiling_events / args.seconds, seq, True
            )
            await arrived(range(seq, seq + len(commit_at)), 120)
            print(
                f"commit ceiling: {len(commit_at) / took:,.0f} events/s (pgbench unthrottled, "
                f"{args.writers} connections, the relay publishing meanwhile)",
                flush=True,
            )
            seq += len(commit_at)

        async def measure(seq: int) -> tuple[list[Point], int]:
            points: list[Point] = []
            cpu_marks: list[float] = []  # the relay's CPU seconds as each load starts
            for rate in args.rates:
                commit_at, took = await asyncio.to_thread(
                    load,
                    args,
                    url,
                    rate,
                    seq,
                    False,
                    lambda: cpu_marks.append(cpu_seconds(pid) or 0.0),
                )
                got = await arrived(range(seq, seq + len(commit_at)), 120)
                relay_cpu = ((cpu_seconds(pid) or 0.0) - cpu_marks[-1]) / len(commit_at)
                wanted = range(seq, seq + len(commit_at))
                counted_from = min(commit_at.values()) + args.warmup_s
                lat = sorted(
                    (got[s] - at) * 1000
                    for s, at in commit_at.items()
                    if at >= counted_from and s in got
                )
                # The broker's append time (and Redis's entry id) is in whole milliseconds,
                # truncated; Postgres's commit time in microseconds. An event appended within
                # the millisecond of its commit can come out up to 1 ms below zero.
                if lat and lat[0] < -1.0:
                    raise RuntimeError(f"an event appended before its commit ({lat[0]:.1f} ms)")
                point = Point(
                    rate,
                    len(commit_at) / took,
                    len(lat),
                    sum(1 for s in wanted if s not in got),
                    percentile(lat, 0.5),
                    percentile(lat, 0.99),
                    lat[-1] if lat else float("nan"),
                )
                print(
                    f"offered {rate:,.0f}/s: committed {point.achieved:,.0f}/s, p50 "
                    f"{point.p50_ms:.1f} ms, p99 {point.p99_ms:.1f} ms, max {point.max_ms:.1f} ms, "
                    f"missing {point.missing}, relay CPU {relay_cpu * 1e6:.0f} us/event "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                points.append(point)
                seq += len(commit_at)
            return points, seq

        points, seq = await measure(seq)
        held_points: list[Point] = []
        if args.held_published:
            # The same loads again, after held_published events went out while a
            # REPEATABLE READ snapshot (on a table of its own) stayed open: every one of
            # them left a dead row that vacuum may not remove.
            holder = psycopg.connect(url)
            holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(Q["latency_holder_create"])
            holder.execute(Q["latency_holder_read"]).fetchall()
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    left = args.held_published
                    while left > 0:
                        n = min(left, 50_000)
                        conn.execute(Q["latency_bulk_load"], {"n": n, "topic": TOPIC})
                        left -= n
                    while conn.execute(Q["latency_unpublished"]).fetchone() != (0,):
                        if not relay.alive():
                            raise RuntimeError(f"the relay exited:\n{relay.tail()}")
                        # The count walks every dead entry: rarely, not to load the relay.
                        await asyncio.sleep(3.0)
                print(f"published {args.held_published:,} events under a held snapshot", flush=True)
                held_points, seq = await measure(seq)
            finally:
                holder.close()
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
        for clean, held in zip(points, held_points, strict=False):
            print(
                f"offered {clean.offered:,.0f}/s: p99 after {args.held_published:,} events "
                f"under a held snapshot / p99 on the clean table: {held.p99_ms:.1f} / "
                f"{clean.p99_ms:.1f} ms = {held.p99_ms / clean.p99_ms:.2f}"
            )
        if args.plot:
            from bench.plot import latency_plot

            written = latency_plot(
                Path(args.plot),
                [("relay (defaults)", p.offered, p.p50_ms, p.p99_ms) for p in points],
                target_ms=25.0,
                target_at=None,
                title="Commit to Kafka latency against offered load",
            )
            print("plot: " + ", ".join(map(str, written)))
        return 0
    finally:
        if relay is not None:
            relay.stop()
        if redis_url:
            await _delete_stream(redis_url, topic)
        else:
            await delete_topics(bootstrap, [topic])
        admin(base, "bench_database_drop", dbname)


async def _delete_stream(redis_url: str, stream: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        await client.delete(stream)
    finally:
        await client.aclose()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--rates", type=lambda s: [float(x) for x in s.split(",")], default=[500.0, 2000.0, 5000.0]
    )
    p.add_argument("--seconds", type=float, default=10.0, help="length of each load")
    p.add_argument("--warmup-s", type=float, default=1.0, help="left out at the start of each load")
    p.add_argument("--writers", type=int, default=16, help="writer connections")
    p.add_argument(
        "--processes", type=int, default=4, help="processes the writer threads are spread over"
    )
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument(
        "--ceiling-events",
        type=int,
        default=30_000,
        help="events committed unthrottled before the loads, to measure the machine's commit "
        "ceiling (0: skip; pgbench writer only)",
    )
    p.add_argument(
        "--writer",
        choices=["pgbench", "emit"],
        default="pgbench",
        help="pgbench: producer_lib's rows inserted by pgbench (bench/pgbench_writer.py); "
        "emit: Outbox.emit + COMMIT from Python threads",
    )
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--idle-s", type=float, default=10.0, help="idle time measured before the loads")
    p.add_argument("--plot", help="write a latency-vs-rate chart here (.svg and .png)")
    p.add_argument(
        "--transport",
        choices=["kafka", "redis"],
        default="kafka",
        help="where the relay publishes (redis: REDIS_URL)",
    )
    p.add_argument(
        "--held-published",
        type=int,
        default=0,
        help="then open a REPEATABLE READ snapshot, let the relay publish this many events "
        "and run the loads again (p99 after / before)",
    )
    p.add_argument("--logdir", help="where the relay's log goes (default a /tmp folder)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("relay_latency", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    sys.exit(main())
