"""What migration 0005 costs on an outbox of kept rows, and what the purge costs after it.

    .venv/bin/python bench/published_history.py                  # 1,000,000 kept rows
    .venv/bin/python bench/published_history.py --rows 100000    # a quick look

In a private database on DATABASE_URL's server, migrated up to 0004 and filled with ROWS
rows a retention=keep relay marked published (over the last week), `outbox-relay
migrate` applies 0005, which moves them into outbox_published. Meanwhile a producer
inserts a row and a claim-like read runs every 10 ms; their longest waits are printed
beside the migration's duration, with the relation locks the migrating session was seen
holding. Then the purge round's rotation with retention 0 drops the partition holding the
moved rows, timed, against deleting the same number of rows in batches of 1000 as the
purge did before (a ratio in the same run).
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

import outbox_core.migrate as migrator  # noqa: E402
from bench.database import admin, load_sql, server_version, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from outbox_core.queries import query  # noqa: E402

Q = load_sql("published_history.sql")
APP = "bench-migrate-0005"


def _watch(url: str, stop: threading.Event, out: dict[str, object]) -> None:
    insert_max = claim_max = 0.0
    locks: set[tuple[str, str, bool]] = set()
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            started = time.perf_counter()
            conn.execute(Q["history_writer_insert"])
            insert_max = max(insert_max, time.perf_counter() - started)
            started = time.perf_counter()
            conn.execute(Q["history_claim_probe"]).fetchall()
            claim_max = max(claim_max, time.perf_counter() - started)
            rows = conn.execute(Q["history_migrator_locks"], {"app": APP}).fetchall()
            locks |= {(str(r[0]), str(r[1]), bool(r[2])) for r in rows}
            time.sleep(0.01)
    out.update(insert_max=insert_max, claim_max=claim_max, locks=locks)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args(argv)
    base = os.environ["DATABASE_URL"]
    name = f"bench_history_{uuid.uuid4().hex[:8]}"
    admin(base, "bench_database_create", name)
    url = with_database(base, name)
    everything = migrator.available
    try:
        migrator.available = lambda dialect: everything(dialect)[:4]
        migrator.migrate(url)
        migrator.available = everything
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(Q["history_fill"], {"rows": args.rows})
            conn.execute(Q["history_analyze"])
        seen: dict[str, object] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(url, stop, seen))
        watcher.start()
        time.sleep(0.2)
        os.environ["PGAPPNAME"] = APP
        started = time.perf_counter()
        report = migrator.migrate(url)
        took = time.perf_counter() - started
        del os.environ["PGAPPNAME"]
        stop.set()
        watcher.join()
        assert report.applied == [5], report
        with psycopg.connect(url, autocommit=True) as conn:
            moved, left = conn.execute(Q["history_counts"]).fetchone() or (0, 0)
            started = time.perf_counter()
            rotate = {"retention_s": 0.0, "width_s": 3600, "ahead_s": 7200, "lock_timeout_ms": 500}
            dropped = conn.execute(query("postgres", "outbox_published_rotate"), rotate).fetchone()
            drop_took = time.perf_counter() - started
        # The purge as it was before 0005: the same rows deleted in batches of 1000.
        migrator.available = lambda dialect: everything(dialect)[:4]
        admin(base, "bench_database_drop", name)
        admin(base, "bench_database_create", name)
        migrator.migrate(url)
        migrator.available = everything
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(Q["history_fill"], {"rows": args.rows})
            conn.execute(Q["history_analyze"])
            purge = query("postgres", "outbox_purge_published")
            started = time.perf_counter()
            while conn.execute(purge, {"retention_s": 0.0, "limit": 1000}).rowcount == 1000:
                pass
            delete_took = time.perf_counter() - started
    finally:
        migrator.available = everything
        admin(base, "bench_database_drop", name)
    print(f"{args.rows:,} kept rows; Postgres {server_version(base)}; moved {moved:,}, left {left}")
    print(f"rotation after it: {dropped}")
    rows = [
        ["migration 0005 (moves every kept row)", f"{took * 1000:.0f}", ""],
        ["  a producer's insert meanwhile, longest", f"{float(seen['insert_max']) * 1000:.0f}", ""],  # type: ignore[arg-type]
        ["  a claim's read meanwhile, longest", f"{float(seen['claim_max']) * 1000:.0f}", ""],  # type: ignore[arg-type]
        ["purge by rotation: DROP of their partition", f"{drop_took * 1000:.0f}", "1x"],
        [
            "purge as before: DELETE in batches of 1000",
            f"{delete_took * 1000:.0f}",
            f"{delete_took / drop_took:.0f}x",
        ],
    ]
    print("\n".join(markdown_table([["what", "ms", "vs DROP"], *rows], 1)))
    # Relations the migration creates are not visible to other sessions until it commits:
    # they show as bare oids, summed up here as "(its new relations)".
    held = {
        ("(its new relations)" if rel.isdigit() else rel, mode)
        for rel, mode, _ in seen["locks"]  # type: ignore[attr-defined]
    }
    print("locks the migrating session was seen holding:")
    for rel, mode in sorted(held):
        print(f"  {rel}: {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded("published_history", lambda: main()))
