"""What an asyncio psycopg connection spends waiting on a large result, against a blocking
one, in one process.

The relay's claim reads thousands of rows in one statement (an 8,000-row cycle is about
2.6 MB in binary). The rows arrive a few kilobytes at a time as the server produces
them, and psycopg's fetch goes back to waiting for the socket after each read, so a
claim is hundreds of waits. On an
AsyncConnection each wait is a turn of the event loop (a reader added and removed, a
future, a timer); on a blocking Connection it is a poll() in C. This bench fetches the
same claim-shaped rows (binary) both ways and prints the client's CPU per query, the
asyncio waits per query, and the ratio.

The way to a blocking fetch in an asyncio relay is a worker thread, which then needs the
GIL back after every read. So the bench also times each way's wall clock per query
beside an event loop kept busy (a task running Python in 1 ms slices with a loop turn
between them, as the relay's lanes do in a drain): asyncio on the loop, against blocking
in asyncio.to_thread. A thread waiting for the GIL asks for it only after a whole switch
interval (5 ms) in which no other thread took it; a loop that releases it at every turn
(its selector's poll) restarts that wait each time, so with slices shorter than the
interval the thread gets the GIL only by luck. --slice-ms and --switch-ms show it; the
busy task gives up after --busy-budget-s, so a starved fetch ends, and the row says so.

A third table (--arrays) asks whether the waits can be designed away: the same rows as
one row of arrays, which the server builds whole before sending, so the client reads it
in a few large reads. It prints the client's and the server backend's CPU per query for
both shapes (the backend's from /proc, so the server must run on this machine).

    .venv/bin/python bench/pg_fetch_waits.py [--rows 8000] [--queries 20] [--busy-queries 5]
        [--rounds 3] [--slice-ms 1] [--switch-ms 5] [--busy-budget-s 60] [--arrays]

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
from bench.procstat import cpu_seconds  # noqa: E402

SQL = load_sql("pg_fetch_waits.sql")
Q = SQL["claim_shaped_rows"]


def blocking_fetch(url: str, rows: int, queries: int) -> float:
    """CPU ms per query."""
    with psycopg.Connection.connect(url, autocommit=True) as conn:
        conn.execute(Q, {"rows": rows}, binary=True).fetchall()  # warm
        cpu = time.process_time()
        for _ in range(queries):
            conn.execute(Q, {"rows": rows}, binary=True).fetchall()
        return (time.process_time() - cpu) / queries * 1000


async def shape_cpu(
    url: str, rows: int, queries: int, arrays: bool
) -> tuple[float, float | None, float]:
    """(client CPU ms, server backend CPU ms, event-loop waits) per query, for the rows as
    rows or as one row of arrays turned back into row tuples. The server's is None when its
    backend is not a process of this machine."""
    query = SQL["claim_shaped_arrays" if arrays else "claim_shaped_rows"]
    loop = asyncio.get_running_loop()
    waits = 0
    add_reader = loop.add_reader

    def counted(*args: Any) -> None:
        nonlocal waits
        waits += 1
        add_reader(*args)

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(SQL["backend_pid"])).fetchone()
        assert row is not None
        pid = int(row[0])
        await (await conn.execute(query, {"rows": rows}, binary=True)).fetchall()  # warm
        server = cpu_seconds(pid)
        setattr(loop, "add_reader", counted)  # noqa: B010 (a method patched for counting)
        try:
            cpu = time.process_time()
            for _ in range(queries):
                result = await (await conn.execute(query, {"rows": rows}, binary=True)).fetchall()
                if arrays:
                    result = list(zip(*result[0], strict=True))
                assert len(result) == rows
            cpu = time.process_time() - cpu
        finally:
            setattr(loop, "add_reader", add_reader)  # noqa: B010
        after = cpu_seconds(pid)
    server_ms = None if server is None or after is None else (after - server) / queries * 1000
    return cpu / queries * 1000, server_ms, waits / queries


async def busy_wall(
    url: str, rows: int, queries: int, threaded: bool, slice_s: float, budget_s: float
) -> tuple[float, bool]:
    """(Wall ms per query while another task keeps the event loop busy, whether the busy
    task ran out of its budget before the queries ended)."""
    done = False
    gave_up = False

    async def busy() -> None:
        nonlocal gave_up
        deadline = time.perf_counter() + budget_s
        while not done:
            until = time.perf_counter() + slice_s
            if until > deadline:
                gave_up = True
                return
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0)

    if threaded:
        conn = psycopg.Connection.connect(url, autocommit=True)

        async def fetch() -> None:
            await asyncio.to_thread(lambda: conn.execute(Q, {"rows": rows}, binary=True).fetchall())
    else:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)

        async def fetch() -> None:
            await (await aconn.execute(Q, {"rows": rows}, binary=True)).fetchall()

    try:
        await fetch()  # warm
        task = asyncio.create_task(busy())
        wall = time.perf_counter()
        for _ in range(queries):
            await fetch()
        wall = time.perf_counter() - wall
        done = True
        await task
    finally:
        await (asyncio.to_thread(conn.close) if threaded else aconn.close())
    return wall / queries * 1000, gave_up


async def run(args: argparse.Namespace) -> int:
    url = os.environ["DATABASE_URL"]
    sys.setswitchinterval(args.switch_ms / 1000)
    print(
        f"{args.rows:,} rows per query, {args.queries} queries per measurement; busy loop in "
        f"{args.slice_ms:g} ms slices, GIL switch interval {args.switch_ms:g} ms"
    )
    print(
        "| round | CPU ms/query, asyncio | waits/query | CPU ms/query, blocking "
        "| CPU asyncio / blocking | wall ms/query beside a busy loop, asyncio "
        "| the same, blocking in a thread | wall thread / asyncio |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in range(1, args.rounds + 1):
        a, _, waits = await shape_cpu(url, args.rows, args.queries, arrays=False)
        b = blocking_fetch(url, args.rows, args.queries)
        busy = (url, args.rows, args.busy_queries)
        limits = (args.slice_ms / 1000, args.busy_budget_s)
        on_loop, loop_gave_up = await busy_wall(*busy, False, *limits)
        threaded, thread_gave_up = await busy_wall(*busy, True, *limits)
        print(
            f"| {n} | {a:.1f} | {waits:.0f} | {b:.1f} | {a / b:.2f} | {on_loop:.1f} "
            f"| {threaded:.1f} | {threaded / on_loop:.2f} |",
            flush=True,
        )
        for way, gave_up in (("asyncio", loop_gave_up), ("thread", thread_gave_up)):
            if gave_up:
                print(
                    f"round {n}: the busy loop stopped after {args.busy_budget_s:g} s before "
                    f"the {way} queries ended; their wall time is a lower bound"
                )
    if args.arrays:
        await print_shapes(url, args)
    return 0


async def print_shapes(url: str, args: argparse.Namespace) -> None:
    print()
    print("| round | shape | client CPU ms/query | server CPU ms/query | together | waits/query |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for n in range(1, args.rounds + 1):
        for shape in ("rows", "arrays"):
            client, server, waits = await shape_cpu(url, args.rows, args.queries, shape == "arrays")
            if server is None:
                raise RuntimeError("--arrays reads the server's CPU from /proc: run it here")
            print(
                f"| {n} | {shape} | {client:.1f} | {server:.1f} | {client + server:.1f} "
                f"| {waits:.0f} |",
                flush=True,
            )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=8000, help="rows per query (16 shards x 500)")
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--busy-queries", type=int, default=5, help="queries beside a busy loop")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slice-ms", type=float, default=1.0, help="busy loop's slice between turns")
    p.add_argument("--switch-ms", type=float, default=5.0, help="sys.setswitchinterval, in ms")
    p.add_argument(
        "--busy-budget-s",
        type=float,
        default=60.0,
        help="the busy loop's longest run per measurement",
    )
    p.add_argument("--arrays", action="store_true", help="also compare rows with one row of arrays")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
