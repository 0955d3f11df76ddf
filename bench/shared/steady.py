"""A steady load of one event per transaction, and its commit-to-append latency.

The load generator costs the machine almost nothing: pgbench commits the events.

The relay benchmarks share two cores with their writers. A Python writer pays ~100 us of
CPU per round trip on this VM (psycopg's BEGIN / INSERT / COMMIT: three), so at 2,000
events/s it takes a core of the two and the relay's latency measures CPU contention. Here
producer_lib builds every event's row before the clock starts (Outbox.prepare and its
insert plan, staged in an unlogged table), and pgbench, written in C, inserts them at the
offered rate (-R: a Poisson schedule, like independent users), one event per transaction,
with the producer's per-key lock. Each transaction also notes its seq in bench_commits, and
the commit time is the one Postgres records for that transaction (track_commit_timestamp,
on in scripts/services.py's cluster; the same clock the broker stamps appends with).
Postgres stamps it as it writes the commit record, before the flush, so the latency counted
from it includes the commit's own fsync: a little more than a writer noting the time after
COMMIT returned would see. (pgbench's own per-transaction log was no use: its time stamps
ran up to 25 ms ahead of the commits.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.shared.database import SQL_DIR, load_sql
from bench.shared.orders import make_orders, sequenced_order_event
from bench.shared.processes import Proc
from outbox_core.codec import codec_for
from outbox_core.sharding import DEFAULT_LOCK_NAMESPACE, lock_key
from producer_lib import Event, Outbox

Q = load_sql("relay_latency.sql")
SCRIPT = SQL_DIR / "relay_latency_writer.pgbench"


def pgbench() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))
    if not found:
        raise RuntimeError("pgbench not found: Debian's postgresql package ships it")
    return found[-1]


def insert_params(outbox: Outbox, event: Event) -> dict[str, Any]:
    """What Outbox.emit inserts for event with its default per-key lock (the row
    Outbox.prepare validates and serializes, and the lock's namespace and key), without
    writing anything."""
    row = outbox.prepare(event)
    return {
        "event_id": codec_for("postgres").uuid(row.event_id),
        "topic": row.topic,
        "key": row.key,
        "shard": row.shard,
        "event_type": row.event_type,
        "payload": row.payload,
        "headers": row.headers_json,
        "lock_ns": DEFAULT_LOCK_NAMESPACE,
        "lock_key": lock_key(row.topic, row.key),
    }


def stage(url: str, events: Iterable[tuple[int, Event]]) -> int:
    """Build and store the rows the writer will insert, by seq; returns how many."""
    outbox = Outbox()
    rows = [{**insert_params(outbox, event), "seq": seq} for seq, event in events]
    with psycopg.connect(url) as conn:
        conn.execute(Q["bench_events_create"])
        conn.execute(Q["bench_commits_create"])
        with conn.cursor() as cur:
            cur.executemany(Q["bench_events_insert"], rows)
    return len(rows)


def write(url: str, rate: float | None, total: int, clients: int, base: int) -> dict[int, float]:
    """Commit staged rows base .. base + total - 1 at `rate` (None: as fast as they go)
    from `clients` connections;
    returns seq -> commit time (epoch seconds, as Postgres recorded it)."""
    if total % clients:
        raise ValueError("total must be a multiple of clients")
    parts = urlsplit(url)
    env = {**os.environ, "PGPASSWORD": unquote(parts.password or "")}
    command = [
        str(pgbench()),
        "--no-vacuum",
        "--protocol=prepared",
        f"--file={SCRIPT}",
        f"--client={clients}",
        f"--jobs={min(clients, 2)}",
        f"--transactions={total // clients}",
        *([f"--rate={rate}"] if rate else []),
        "--define=n=0",
        f"--define=base={base}",
        f"--define=clients={clients}",
        f"--host={parts.hostname}",
        f"--port={parts.port or 5432}",
        f"--username={unquote(parts.username or '')}",
        parts.path.lstrip("/"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench failed ({done.returncode}):\n{done.stderr[-2000:]}")
    with psycopg.connect(url) as conn:
        rows = conn.execute(Q["bench_commits_times"], {"first": base, "last": base + total})
        committed = {int(seq): float(at) for seq, at in rows}
    if len(committed) != total:
        raise RuntimeError(f"pgbench committed {len(committed)} events of {total}")
    return committed


def load(
    args: argparse.Namespace,
    url: str,
    rate: float,
    first_seq: int,
    unthrottled: bool = False,
    starting: Callable[[], object] = lambda: None,
) -> tuple[dict[int, float], float]:
    """One load of args.seconds at rate from args.writers connections: seq -> commit time,
    and the time it took. unthrottled: as fast as the writers commit. starting is called
    just before the first write (after the rows are staged)."""
    total = max(1, int(rate * args.seconds) // args.writers) * args.writers
    orders = make_orders(random.Random(first_seq), 500)
    rng = random.Random(first_seq)
    stage(
        url,
        (
            (seq, sequenced_order_event(rng, args.keys, seq, orders[seq % len(orders)]))
            for seq in range(first_seq, first_seq + total)
        ),
    )
    starting()
    committed = write(url, None if unthrottled else rate, total, args.writers, first_seq)
    return committed, max(committed.values()) - min(committed.values())


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


Arrived = Callable[[range, float], Awaitable[dict[int, float]]]


async def warm_up(url: str, keys: int, relay: Proc, arrived: Arrived) -> int:
    """Two seconds of 50 events/s from one writer, delivered (arrived: seq -> append time
    of the wanted events found within a timeout) before anything is measured: the next
    seq."""
    quick = argparse.Namespace(seconds=2.0, writers=1, keys=keys)
    commit_at, _ = await asyncio.to_thread(load, quick, url, 50.0, 0)
    got = await arrived(range(len(commit_at)), 120)
    if len(got) < len(commit_at):
        raise RuntimeError(f"the warm-up was not delivered:\n{relay.tail()}")
    return len(commit_at)


def latencies(
    commit_at: dict[int, float], got: dict[int, float], warmup_s: float
) -> tuple[list[float], int]:
    """Commit-to-append milliseconds, sorted, of the events committed after the load's first
    warmup_s, and how many events of the load never arrived."""
    counted_from = min(commit_at.values()) + warmup_s
    lat = sorted(
        (got[s] - at) * 1000 for s, at in commit_at.items() if at >= counted_from and s in got
    )
    # The broker's append time is in whole milliseconds, truncated; Postgres's commit time
    # in microseconds. An event appended within the millisecond of its commit can come out
    # up to 1 ms below zero.
    if lat and lat[0] < -1.0:
        raise RuntimeError(f"an event appended before its commit ({lat[0]:.1f} ms)")
    return lat, sum(1 for s in commit_at if s not in got)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def statements(url: str, dbname: str) -> int:
    """Transactions the database has committed or rolled back (every relay statement is
    its own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(Q["database_transactions"], {"dbname": dbname}).fetchone()
    return int(row[0]) if row else 0
