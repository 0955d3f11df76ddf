"""Where a claim's time goes when a snapshot older than the published rows is held open.

    .venv/bin/python bench/horizon_explain.py                       # 0, 150k, 450k dead rows
    .venv/bin/python bench/horizon_explain.py --levels 0,20000      # a quick look

In a private database, a REPEATABLE READ transaction reads a table of its own and stays
open. For each level of dead rows (rows published after that snapshot, which vacuum may not
remove), a fresh backlog of 500 rows a shard is loaded, and the plain claim of every shard
(batch 500) and the retention=keep settle of one shard's 500 rows are run under
EXPLAIN (ANALYZE, BUFFERS); then the backlog is published and the claim explained again,
empty (the idle probe), with the statements beside the cycle that walk unpublished entries
(the backlog gauges, the floors' rescan). The claim is explained as the relay runs it, with the claim
floors the relay would have computed (`floored`) and with every floor at 0 (`unfloored`).
Prints the buffers and times, and the plans with --plans.

Uses DATABASE_URL as given (`eval "$(scripts/services env)"`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.database import admin, load_sql, with_database  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from outbox_core.queries import query  # noqa: E402
from producer_lib import migrate  # noqa: E402

Q = load_sql("horizon_explain.sql")
SHARDS = 16
BATCH = 500
RESCAN_SLICES = 60  # the slices of one rescan sweep (relay/control/floors.py)

Conn = psycopg.Connection[tuple[Any, ...]]


def explain(conn: Conn, name: str, params: dict[str, Any]) -> dict[str, Any]:
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("postgres", name), params
    ).fetchone()
    assert row is not None
    plan: dict[str, Any] = row[0][0]
    return plan


def buffers(plan: dict[str, Any]) -> int:
    top = plan["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def claim_params(floors: list[int]) -> dict[str, Any]:
    return {
        "shards": list(range(SHARDS)),
        "floors": floors,
        "limit": BATCH,
        "in_flight": [],
        "held_keys": [],
        "shard_bytes": 2**62,  # no byte bound, as bench/outbox_bloat.py
    }


def settle_params(ids: list[int]) -> dict[str, Any]:
    return {
        "shards": [0],
        "tokens": [1],
        "owner": "bench",
        "published_ids": ids,
        "failed_ids": [],
        "errors": [],
        "delays_s": [],
        "parks": [],
        "move_max_bytes": 64 * 1024,  # retention_move_max_bytes, its default
    }


def floors_now(conn: Conn) -> list[int]:
    """What the relay's floor round computes once nothing is writing: every id at or
    below the sequence's last value is decided."""
    rows = conn.execute(query("postgres", "outbox_floor_mark")).fetchone()
    assert rows is not None
    last = int(rows[0] or 0)
    found = conn.execute(
        query("postgres", "outbox_floor_lowest"),
        {"shards": list(range(SHARDS)), "floors": [0] * SHARDS},
    ).fetchall()
    lowest = {int(s): (None if m is None else int(m)) for s, m in found}
    floors = []
    for shard in range(SHARDS):
        low = lowest[shard]
        floors.append(last if low is None else min(last, low - 1))
    return floors


def side_statements(conn: Conn, floors: list[int]) -> dict[str, dict[str, Any]]:
    """The relay's statements beside the cycle that walk unpublished entries: the backlog
    gauges (floored as the relay runs them, and the per-tenant one unfloored, as it was),
    the floors' rescan as one walk from the bottom (as it was) and as one slice of the
    sweep (relay/control/floors.py, RESCAN_SLICES)."""
    shards = list(range(SHARDS))
    gauge = {"shard_count": SHARDS, "shards": shards, "floors": floors}
    tenants = {"top": 10, "shards": shards, "floors": floors}
    top = max(floors)
    first_slice = min(top, -(-top // RESCAN_SLICES))
    return {
        "backlog gauge floored": explain(conn, "outbox_backlog", gauge),
        "tenant gauge unfloored": explain(
            conn, "outbox_backlog_by_tenant", {**tenants, "floors": [0] * SHARDS}
        ),
        "tenant gauge floored": explain(conn, "outbox_backlog_by_tenant", tenants),
        "rescan from the bottom": explain(
            conn, "outbox_floor_lowest", {"shards": shards, "floors": [0] * SHARDS}
        ),
        "rescan slice": explain(
            conn,
            "outbox_floor_rescan",
            {"shards": shards, "low": 0, "high": [min(first_slice, f) for f in floors]},
        ),
    }


def run(levels: list[int], show_plans: bool) -> None:
    server = os.environ["DATABASE_URL"]
    dbname = f"bench_horizon_{uuid.uuid4().hex[:8]}"
    admin(server, "bench_database_create", dbname)
    url = with_database(server, dbname)
    rows: list[list[str]] = []
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(Q["horizon_holder_create"])
            conn.execute(Q["horizon_leases"], {"shard_count": SHARDS})
        holder = psycopg.connect(url)
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute(Q["horizon_holder_read"]).fetchall()  # the snapshot; never ends
        dead = 0
        with psycopg.connect(url, autocommit=True) as conn:
            for level in levels:
                if level > dead:
                    conn.execute(Q["horizon_load"], {"n": level - dead, "shard_count": SHARDS})
                    conn.execute(Q["horizon_publish_all"])
                    dead = level
                conn.execute(Q["horizon_load"], {"n": BATCH * SHARDS, "shard_count": SHARDS})
                plans = {
                    "claim unfloored": explain(
                        conn, "outbox_claim_batch", claim_params([0] * SHARDS)
                    ),
                    "claim floored": explain(
                        conn, "outbox_claim_batch", claim_params(floors_now(conn))
                    ),
                }
                ids = [
                    int(r[0])
                    for r in conn.execute(
                        Q["horizon_pending_of_shard"], {"shard": 0, "limit": BATCH}
                    )
                ]
                with conn.transaction(force_rollback=True):
                    plans["settle keep"] = explain(conn, "outbox_settle_keep", settle_params(ids))
                for what, plan in plans.items():
                    rows.append(
                        [f"{level:,}", what, f"{buffers(plan):,}", f"{plan['Execution Time']:.1f}"]
                    )
                    if show_plans:
                        print(f"-- {level:,} dead rows, {what}\n{json.dumps(plan, indent=1)}")
                conn.execute(Q["horizon_publish_all"])
                dead += BATCH * SHARDS
                # The idle probe: the same claim once the backlog is published too.
                plans = {
                    "empty claim unfloored": explain(
                        conn, "outbox_claim_batch", claim_params([0] * SHARDS)
                    ),
                    "empty claim floored": explain(
                        conn, "outbox_claim_batch", claim_params(floors_now(conn))
                    ),
                    **side_statements(conn, floors_now(conn)),
                }
                for what, plan in plans.items():
                    rows.append(
                        [f"{dead:,}", what, f"{buffers(plan):,}", f"{plan['Execution Time']:.1f}"]
                    )
                    if show_plans:
                        print(f"-- {dead:,} dead rows, {what}\n{json.dumps(plan, indent=1)}")
        holder.close()
    finally:
        admin(server, "bench_database_drop", dbname)
    header = ["dead rows", "statement", "shared buffers", "ms"]
    print("\n".join(markdown_table([header, *rows], 2)))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--levels", default="0,150000,450000", help="dead rows, a comma list")
    p.add_argument("--plans", action="store_true", help="print the plans as JSON")
    args = p.parse_args(argv)
    run([int(x) for x in args.levels.split(",")], args.plans)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
