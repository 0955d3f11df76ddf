"""What a batch of large payloads costs producer_lib's emit_batch on Postgres (psycopg 3),
with the payloads bound as a binary bytea[] (as emit_batch binds them) against the same
batches bound as a plain list, which psycopg sends as text: every byte as two hex digits,
parsed back by the server. Rounds alternate the two in one process, each writing EVENTS
events of SIZE random bytes in batches of BATCH, one transaction a batch, into a private
database (migrated, dropped at the end).

    .venv/bin/python bench/emit_large.py [--events 100] [--size 1000000] [--batch 10] [--rounds 3]

Uses DATABASE_URL (`eval "$(scripts/services env)"`). Prints each round's MB/s and the
medians' ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.compare.common import loadavg  # noqa: E402
from bench.database import admin, load_sql, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from producer_lib import Event, Outbox, migrate  # noqa: E402

Q = load_sql("large_events.sql")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100)
    p.add_argument("--size", type=int, default=1_000_000, help="payload bytes")
    p.add_argument("--batch", type=int, default=10, help="events per emit_batch")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if min(args.events, args.size, args.batch, args.rounds) < 1:
        p.error("--events, --size, --batch and --rounds must be positive")
    return args


def write(url: str, args: argparse.Namespace, payloads: list[bytes]) -> float:
    outbox = Outbox(max_event_bytes=args.size + 64 * 1024)
    with psycopg.connect(url) as conn:
        conn.execute(Q["large_clear"])
        conn.commit()
        start = time.perf_counter()
        for first in range(0, args.events, args.batch):
            events = [
                Event("large", f"k{i}", "Blob", payloads[i % len(payloads)])
                for i in range(first, min(args.events, first + args.batch))
            ]
            outbox.emit_batch(conn, events)
            conn.commit()
        return time.perf_counter() - start


def text_arrays(sql: str, params: Any) -> str:
    return sql


def run(args: argparse.Namespace) -> int:
    server = os.environ["DATABASE_URL"]
    dbname = f"bench_emit_large_{uuid.uuid4().hex[:8]}"
    admin(server, "bench_database_create", dbname)
    url = with_database(server, dbname)
    payloads = [random.Random(i).randbytes(args.size) for i in range(4)]
    mb = args.events * args.size / 1e6
    rates: dict[str, list[float]] = {"text": [], "binary": []}
    try:
        migrate(url)
        for n in range(args.rounds):
            with mock.patch("outbox_core.executors.binary_byte_arrays", text_arrays):
                rates["text"].append(mb / write(url, args, payloads))
            rates["binary"].append(mb / write(url, args, payloads))
            print(
                f"[emit_large] round {n + 1}: text {rates['text'][-1]:.1f} MB/s, "
                f"binary {rates['binary'][-1]:.1f} MB/s",
                flush=True,
            )
    finally:
        admin(server, "bench_database_drop", dbname)
    text, binary = (statistics.median(rates[k]) for k in ("text", "binary"))
    print(
        f"{args.events} events of {args.size:,} B in batches of {args.batch}: binary "
        f"{binary:.1f} MB/s, text {text:.1f} MB/s, binary / text {binary / text:.2f} "
        f"(medians of {args.rounds}; load average {loadavg()})"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("emit_large", lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
