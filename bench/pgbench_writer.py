"""A load generator that costs the machine almost nothing: pgbench commits the events.

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

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg

from bench.database import load_sql
from outbox_core.codec import codec_for
from producer_lib import Event, Outbox
from producer_lib.plans import emit_one

Q = load_sql("relay_latency.sql")
SCRIPT = Path(__file__).resolve().parent / "sql" / "relay_latency_writer.pgbench"


def pgbench() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))
    if not found:
        raise RuntimeError("pgbench not found: Debian's postgresql package ships it")
    return found[-1]


def insert_params(outbox: Outbox, event: Event) -> Mapping[str, Any]:
    """The parameters Outbox.emit binds to its INSERT for event (its shard, lock key,
    serialized payload and headers), without writing anything."""
    opts = replace(outbox._opts, check_shard_count=False)  # checked by the bench's migrate
    statement = next(emit_one(outbox.prepare(event), "postgres", opts))
    assert isinstance(statement.params, Mapping)
    return statement.params


def stage(url: str, events: Iterable[tuple[int, Event]]) -> int:
    """Build and store the rows the writer will insert, by seq; returns how many."""
    outbox = Outbox()
    rows = []
    for seq, event in events:
        params = insert_params(outbox, event)
        rows.append(
            {**params, "seq": seq, "event_id": codec_for("postgres").uuid(params["event_id"])}
        )
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
