"""Backlogs drained one after another by one relay, with and without an old snapshot open.

    .venv/bin/python bench/outbox_bloat.py                     # 4 backlogs of 150,000 each mode
    .venv/bin/python bench/outbox_bloat.py --events 20000 --rounds 2   # a quick look

Every published row leaves a dead tuple behind in outbox_events (the settle deletes it;
retention=keep moves it into outbox_published), which vacuum may not remove while a snapshot older
than it is open anywhere on the server. This bench shows what that does to the relay: for
each mode ("clean": nothing else open; "held": one REPEATABLE READ transaction that read a
small table of its own, left open from the start) it makes a private database, starts
`outbox-relay run` with every setting at its default, and commits ROUNDS backlogs of EVENTS
events, each in one transaction, waiting for each to drain before the next. A round's rate
is its events over the time from its first settle to its last. After each round the plain
claim of every shard is explained on the drained outbox, so the buffers an empty claim (the
idle probe) touches are printed beside the rate.

Uses DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS as given (`eval "$(scripts/services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.compare.processes import Proc, launch, relay_env  # noqa: E402
from bench.compare.topics import create_topic, delete_topics  # noqa: E402
from bench.database import admin, load_sql, with_database  # noqa: E402
from bench.guard import run_guarded  # noqa: E402
from bench.markdown_table import markdown_table  # noqa: E402
from bench.orders import make_orders, sequenced_order_event  # noqa: E402
from outbox_core.queries import query  # noqa: E402
from producer_lib import Outbox, migrate  # noqa: E402

Q = load_sql("outbox_bloat.sql")
MODES = ("clean", "held")
# With --baseline-tree, each mode also runs as "<mode>-base": the relay of that tree.
BASE = "-base"
TOPIC = "orders"
EMIT_CHUNK = 1000
DRAIN_TIMEOUT_S = 900.0


@dataclass
class Round:
    events_per_s: float
    claim_buffers: int  # shared buffers an empty claim of every shard touched
    claim_ms: float


@dataclass
class Mode:
    name: str
    rounds: list[Round] = field(default_factory=list)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=150_000, help="events per backlog")
    p.add_argument("--rounds", type=int, default=4, help="backlogs drained one after another")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--modes", default=",".join(MODES), help="comma list of clean,held")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--baseline-tree",
        type=Path,
        help="a checkout of the baseline (git worktree add --detach DIR main): each mode runs "
        "its relay too, as <mode>-base, and the report gives this tree's rate over its",
    )
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        p.error(f"--modes takes a comma list of {', '.join(MODES)}")
    if args.events < 1 or args.rounds < 1:
        p.error("--events and --rounds must be positive")
    if args.baseline_tree is not None:
        if not (args.baseline_tree / "relay" / "cli.py").is_file():
            p.error(f"--baseline-tree {args.baseline_tree} holds no relay/cli.py")
        modes = [m for mode in modes for m in (mode, mode + BASE)]
    args.modes = modes
    return args


def write_template(url: str, events: int, keys: int, seed: int) -> None:
    """producer_lib writes the events once; each round loads a copy with new event ids."""
    rng = random.Random(seed)
    outbox = Outbox()
    with psycopg.connect(url) as conn:
        for start in range(0, events, EMIT_CHUNK):
            orders = make_orders(rng, min(EMIT_CHUNK, events - start))
            outbox.emit_batch(
                conn,
                [sequenced_order_event(rng, keys, start + i, o) for i, o in enumerate(orders)],
            )
        conn.execute(Q["bloat_template_create"])
        conn.execute(Q["bloat_outbox_truncate"])
        conn.execute(Q["bloat_holder_create"])


def explain_claim(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int, float]:
    params = {
        "shards": list(range(16)),
        "floors": [0] * 16,
        "limit": 500,
        "in_flight": [],
        "shard_bytes": 2**62,
        "held_keys": [],
    }
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("postgres", "outbox_claim_batch"),
        params,
    ).fetchone()
    assert row is not None
    plan = row[0][0]  # type: ignore[index]
    top = plan["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"]), float(
        plan["Execution Time"]
    )


async def drain_round(url: str, relay: Proc) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        ids = conn.execute(Q["bloat_load"]).fetchall()
        first_id = min(int(r[0]) for r in ids)
        last_of_shard: dict[int, int] = {}
        for row_id, shard in ids:
            last_of_shard[int(shard)] = max(int(row_id), last_of_shard.get(int(shard), 0))
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            row = conn.execute(
                Q["bloat_last_published"], {"ids": list(last_of_shard.values())}
            ).fetchone()
            if row is not None and row[0]:
                left = conn.execute(Q["bloat_unpublished"]).fetchone()
                if left is not None and int(left[0]) == 0:
                    break
            if not relay.alive():
                raise RuntimeError(f"the relay exited:\n{relay.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the backlog did not drain in {DRAIN_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.1)
        rate = conn.execute(Q["bloat_round_rate"], {"first_id": first_id}).fetchone()
    assert rate is not None
    count, seconds = int(rate[0]), float(rate[1] or 0.0)
    return count / seconds if seconds > 0 else float("inf")


async def run_mode(args: argparse.Namespace, name: str, logdir: Path) -> Mode:
    server = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    dbname = f"bench_bloat_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    prefix = f"{dbname}_"
    admin(server, "bench_database_create", dbname)
    url = with_database(server, dbname)
    mode = Mode(name)
    holder: psycopg.Connection[tuple[object, ...]] | None = None
    relay: Proc | None = None
    try:
        migrate(url)
        write_template(url, args.events, args.keys, args.seed)
        await create_topic(bootstrap, prefix + TOPIC, args.partitions)
        if name.startswith("held"):
            holder = psycopg.connect(url)
            holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            holder.execute(Q["bloat_holder_read"]).fetchall()  # takes the snapshot; never ends
        cmd = [sys.executable, "-m", "relay.cli", "run"]
        env = relay_env(url, bootstrap, prefix)
        tree = ROOT
        if name.endswith(BASE):
            tree = args.baseline_tree.resolve()
            env["PYTHONPATH"] = str(tree)
        relay = launch(f"relay-{name}", cmd, env, logdir, cwd=tree)
        for n in range(args.rounds):
            rate = await drain_round(url, relay)
            with psycopg.connect(url, autocommit=True) as conn:
                buffers, ms = explain_claim(conn)
            mode.rounds.append(Round(rate, buffers, ms))
            print(
                f"[bloat] {name} round {n + 1}: {rate:,.0f} events/s; an empty claim touches "
                f"{buffers:,} buffers ({ms:.1f} ms)",
                flush=True,
            )
    finally:
        if relay is not None:
            relay.stop()
        if holder is not None:
            holder.close()
        await delete_topics(bootstrap, [prefix + TOPIC])
        admin(server, "bench_database_drop", dbname)
    return mode


def report(modes: list[Mode]) -> str:
    by_name = {m.name: m for m in modes}
    rows = []
    for m in modes:
        first = m.rounds[0].events_per_s
        rows.append(
            [
                m.name,
                *(f"{r.events_per_s:,.0f}" for r in m.rounds),
                f"{m.rounds[-1].events_per_s / first:.2f}",
                *(f"{r.claim_buffers:,}" for r in m.rounds),
            ]
        )
    n = len(modes[0].rounds)
    header = [
        "mode",
        *(f"round {i + 1} ev/s" for i in range(n)),
        "last / first",
        *(f"empty claim buffers {i + 1}" for i in range(n)),
    ]
    text = "\n".join(markdown_table([header, *rows], 1)) + "\n"
    if "clean" in by_name and "held" in by_name:
        ratios = [
            h.events_per_s / c.events_per_s
            for h, c in zip(by_name["held"].rounds, by_name["clean"].rounds, strict=True)
        ]
        text += "\nheld / clean per round: " + ", ".join(f"{r:.2f}" for r in ratios) + "\n"
    for name in MODES:
        if name in by_name and name + BASE in by_name:
            mine, base = by_name[name].rounds, by_name[name + BASE].rounds
            ratios = [a.events_per_s / b.events_per_s for a, b in zip(mine, base, strict=True)]
            total = sum(r.events_per_s for r in mine) / sum(r.events_per_s for r in base)
            text += (
                f"{name} / {name}{BASE} per round: "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + f"; mean rate {total:.2f}\n"
            )
    return text


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="outbox-bloat-") as tmp:
        modes = [await run_mode(args, name, Path(tmp)) for name in args.modes]
    print(report(modes))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("outbox_bloat", lambda: asyncio.run(run(args)))


if __name__ == "__main__":
    raise SystemExit(main())
