"""What adding the headers constraint (migration 0004) costs on a large outbox, and what a
producer's insert waits meanwhile.

    .venv/bin/python bench/headers_check.py                  # 1,000,000 rows
    .venv/bin/python bench/headers_check.py --rows 100000    # a quick look

In a private database on DATABASE_URL's server, migrated and filled with ROWS rows, three
ways of adding the CHECK are timed, each from a table without it: ADD ... NOT VALID (what
0004 does), VALIDATE CONSTRAINT after it (what an operator may run later), and a plain
ADD (which reads every row under the ALTER's ACCESS EXCLUSIVE lock). While each runs, a
second connection inserts one row the way producer_lib does; its wait is printed beside
the statement's duration, and both as a ratio to NOT VALID's in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.database import admin, load_sql, server_version, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from producer_lib import migrate  # noqa: E402

Q = load_sql("headers_check.sql")
WRITER_DELAY_S = 0.02  # the insert starts once the ALTER has taken its lock


def timed(url: str, statement: str) -> tuple[float, float]:
    """(the statement's seconds, a concurrent insert's seconds)."""
    waited: list[float] = []

    def writer() -> None:
        time.sleep(WRITER_DELAY_S)
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            conn.execute(Q["check_writer_insert"])
            waited.append(time.perf_counter() - started)

    with psycopg.connect(url, autocommit=True) as conn:
        thread = threading.Thread(target=writer)
        started = time.perf_counter()
        thread.start()
        conn.execute(Q[statement])
        took = time.perf_counter() - started
        thread.join()
    return took, waited[0]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args(argv)
    base = os.environ["DATABASE_URL"]
    name = f"bench_check_{uuid.uuid4().hex[:8]}"
    admin(base, "bench_database_create", name)
    url = with_database(base, name)
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(Q["check_drop"])
            conn.execute(Q["check_fill"], {"rows": args.rows})
            conn.execute(Q["check_analyze"])
        results = {}
        results["ADD ... NOT VALID (0004)"] = timed(url, "check_add_not_valid")
        results["VALIDATE CONSTRAINT (later)"] = timed(url, "check_validate")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(Q["check_drop"])
        results["plain ADD (a scan under the lock)"] = timed(url, "check_add")
    finally:
        admin(base, "bench_database_drop", name)
    base_took, base_wait = results["ADD ... NOT VALID (0004)"]
    print(f"{args.rows:,} rows; Postgres {server_version(base)}")
    rows = [
        [
            what,
            f"{took * 1000:.0f}",
            f"{wait * 1000:.0f}",
            f"{took / base_took:.0f}x",
            f"{wait / base_wait:.1f}x",
        ]
        for what, (took, wait) in results.items()
    ]
    header = ["statement", "ms", "insert waited ms", "ms vs NOT VALID", "wait vs NOT VALID"]
    print("\n".join(markdown_table([header, *rows], 1)))
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded("headers_check", lambda: main()))
