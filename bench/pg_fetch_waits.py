"""What an asyncio psycopg connection spends waiting on a large result, against a blocking
one, in one process.

The relay's claim reads thousands of rows in one statement (an 8,000-row cycle is about
2.6 MB in binary). libpq reads at most its input buffer's free space per read (8-16 KB),
and psycopg's fetch goes back to waiting for the socket after each read, so a claim is
hundreds of waits even when the rest of the result is already in the socket. On an
AsyncConnection each wait is a turn of the event loop (a reader added and removed, a
future, a timer); on a blocking Connection it is a poll() in C. This bench fetches the
same claim-shaped rows (binary) both ways and prints the client's CPU per query, the
asyncio waits per query, and the ratio.

    .venv/bin/python bench/pg_fetch_waits.py [--rows 8000] [--queries 20] [--rounds 3]

Needs DATABASE_URL (`eval "$(scripts/services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.database import load_sql  # noqa: E402

Q = load_sql("pg_fetch_waits.sql")["claim_shaped_rows"]


async def async_fetch(url: str, rows: int, queries: int) -> tuple[float, float]:
    """(CPU ms per query, event-loop waits per query)."""
    loop = asyncio.get_running_loop()
    waits = 0
    add_reader = loop.add_reader

    def counted(*args: Any) -> None:
        nonlocal waits
        waits += 1
        add_reader(*args)

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await (await conn.execute(Q, {"rows": rows}, binary=True)).fetchall()  # warm
        setattr(loop, "add_reader", counted)  # noqa: B010 (a method patched for counting)
        try:
            cpu = time.process_time()
            for _ in range(queries):
                await (await conn.execute(Q, {"rows": rows}, binary=True)).fetchall()
            cpu = time.process_time() - cpu
        finally:
            setattr(loop, "add_reader", add_reader)  # noqa: B010
    return cpu / queries * 1000, waits / queries


def blocking_fetch(url: str, rows: int, queries: int) -> float:
    """CPU ms per query."""
    with psycopg.Connection.connect(url, autocommit=True) as conn:
        conn.execute(Q, {"rows": rows}, binary=True).fetchall()  # warm
        cpu = time.process_time()
        for _ in range(queries):
            conn.execute(Q, {"rows": rows}, binary=True).fetchall()
        return (time.process_time() - cpu) / queries * 1000


async def run(args: argparse.Namespace) -> int:
    url = os.environ["DATABASE_URL"]
    print(f"{args.rows:,} rows per query, {args.queries} queries per measurement")
    print("| round | asyncio ms/query | waits/query | blocking ms/query | asyncio / blocking |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in range(1, args.rounds + 1):
        a, waits = await async_fetch(url, args.rows, args.queries)
        b = blocking_fetch(url, args.rows, args.queries)
        print(f"| {n} | {a:.1f} | {waits:.0f} | {b:.1f} | {a / b:.2f} |", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=8000, help="rows per query (16 shards x 500)")
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
