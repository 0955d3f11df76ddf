"""The relay's drain with Kafka transactions (kafka_transactions) against without, in the
same run.

    .venv/bin/python -m bench relay_transactions                         # 3 rounds
    .venv/bin/python -m bench relay_transactions --events 20000 --rounds 1

bench/compare's template backlog (producer_lib's order events, --events of them over
--keys keys) is copied and drained by `python -m relay.cli run` (defaults) once plain and
once with OUTBOX_KAFKA_TRANSACTIONS=true (a transactional id prefix and a progress topic
of the drain's own) in each round, the order reversed every other round, each into a
fresh topic, every topic audited whole afterwards (bench/compare's drain and audit).

The rate of both is events over the active window (first record on the topic to the
outbox empty): a transactional topic's end offsets count each transaction's commit
markers too, so the window's record count is not used. The audit reads the topic
read_uncommitted: an aborted transaction's records would count as duplicates there (a
drain without faults aborts none). Exits 1 when a drain lost or reordered events, or when
the transactional drain's median is below --bar of the plain one's.

Commit to visible (--latency-rates): bench/compare/latency.py's offered loads, received
read_committed from a transactional variant, for each of --latency-variants:
- plain, transactions: the relay, as in the drains;
- floor, floor-transactions: the cheapest loop doing the same work, bench/steady_floor.py
  (one delete-returning statement, one produce request a cycle; with --transactions each
  cycle's sends one Kafka transaction), launched as the relay is, in its place.
The floor sleeps --floor-gather-s after each cycle. Its default is the relay's
probe_gather_s: at these loads a relay cycle finds fewer than probe_gather_rows rows, so
the relay starts a cycle every probe_gather_s (relay/pipeline/loop.py). The relay counts
that wait from the cycle's start, the floor from its end, so the floor's cycles are never
closer together than the relay's: its pacing does not flatter it. The printout ends with
p99 transactions / plain at each rate, for the relay and for the floor, against
--latency-bar (reported; the exit status is the drain's alone).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.compare.backlog import build_template
from bench.compare.common import say
from bench.compare.context import Context
from bench.compare.drain import Drain
from bench.compare.latency import LatencyPoint
from bench.compare.ours import RELAY_GATHER_S, drain_relay, latency_floor, latency_ours
from bench.compare.services import Services
from bench.formats.drains import unsound
from bench.shared.cli import add_logdir, add_services, check_services, parser, run_in_logdir
from bench.shared.procstat import loadavg
from bench.shared.tables import markdown_table

VARIANTS = ("plain", "transactions")
# Each transactional latency variant beside its plain twin: the relay's, the floor's.
LATENCY_PAIRS = {"relay": ("plain", "transactions"), "floor": ("floor", "floor-transactions")}
LATENCY_VARIANTS = tuple(v for pair in LATENCY_PAIRS.values() for v in pair)


def variant_env(variant: str, run_id: str, round_no: int) -> dict[str, str]:
    if variant == "plain":
        return {}
    return {
        "OUTBOX_KAFKA_TRANSACTIONS": "true",
        "OUTBOX_KAFKA_TRANSACTIONAL_ID_PREFIX": f"bench-{run_id}-r{round_no}",
        "OUTBOX_KAFKA_PROGRESS_TOPIC": f"bench-progress-{run_id}-r{round_no}",
    }


def rate(drain: Drain) -> float:
    """Events per second over the active window (see the module's docstring)."""
    return drain.events / drain.active_s if drain.active_s > 0 else 0.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    p.add_argument("--events", type=int, default=100_000, help="the drain's backlog")
    p.add_argument("--rounds", type=int, default=3, help="drains per variant (median reported)")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4, help="of every private topic")
    p.add_argument("--bar", type=float, default=0.7, help="transactions / plain, at least")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--latency-rates",
        type=lambda text: [float(r) for r in text.split(",") if r],
        default=[500.0, 2000.0],
        help="offered loads (events/s) of the commit-to-visible part; empty: skip it",
    )
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument("--latency-warmup-s", type=float, default=2.0)
    p.add_argument(
        "--latency-variants",
        type=lambda text: text.split(","),
        default=list(LATENCY_VARIANTS),
        help="of the commit-to-visible part, a comma list of "
        f"{', '.join(LATENCY_VARIANTS)}, each once",
    )
    p.add_argument(
        "--floor-gather-s",
        type=float,
        default=RELAY_GATHER_S,
        help="the floor loop's sleep after each cycle (default: the relay's probe_gather_s)",
    )
    p.add_argument(
        "--latency-bar",
        type=float,
        default=2.0,
        help="p99 transactions / plain, at most (reported, not the exit status)",
    )
    add_logdir(p)
    args = p.parse_args(argv)
    check_services(p, args)
    if args.events < 1000 or args.rounds < 1 or args.partitions < 1:
        p.error("--rounds and --partitions must be at least 1, --events 1000")
    unknown = [v for v in args.latency_variants if v not in LATENCY_VARIANTS]
    if unknown or len(set(args.latency_variants)) < len(args.latency_variants):
        p.error(
            f"--latency-variants takes a comma list of {', '.join(LATENCY_VARIANTS)}, each once"
        )
    if not 0 <= args.floor_gather_s <= 1:
        p.error("--floor-gather-s takes 0 to 1 s")
    if not args.latency_bar > 0:
        p.error("--latency-bar must be above 0")
    return args


def table(drains: dict[str, list[Drain]]) -> list[str]:
    plain = statistics.median(rate(d) for d in drains["plain"])
    rows = [["variant", "events/s (median)", "/ plain", "rounds (events/s)", "audit"]]
    for variant, runs in drains.items():
        median = statistics.median(rate(d) for d in runs)
        audits = [d.audit for d in runs]
        audit = "; ".join(
            "unread"
            if a is None
            else f"{a.distinct:,} distinct, {a.lost} lost, {a.duplicates} dup, "
            f"{a.order_violations} order"
            for a in audits
        )
        rows.append(
            [
                variant,
                f"{median:,.0f}",
                f"{median / plain:.2f}" if plain else "-",
                ", ".join(f"{rate(d):,.0f}" for d in runs),
                audit,
            ]
        )
    return markdown_table(rows, 1)


def latency_table(latency: dict[str, list[LatencyPoint]]) -> list[str]:
    rows = [["variant", "offered/s", "committed/s", "p50 ms", "p99 ms", "max ms", "missing"]]
    for variant, points in latency.items():
        rows += [
            [
                variant,
                f"{p.offered:,.0f}",
                f"{p.achieved:,.0f}",
                f"{p.p50_ms:.1f}",
                f"{p.p99_ms:.1f}",
                f"{p.max_ms:.1f}",
                f"{p.missing}",
            ]
            for p in points
        ]
    return markdown_table(rows, 1)


def latency_ratios(latency: dict[str, list[LatencyPoint]], bar: float) -> list[str]:
    """p99 transactions / plain at each rate, of the relay and of the floor (where both
    variants of the pair were measured)."""
    lines = []
    for name, (plain, with_tx) in LATENCY_PAIRS.items():
        if plain not in latency or with_tx not in latency:
            continue
        for p, t in zip(latency[plain], latency[with_tx], strict=True):
            ratio = t.p99_ms / p.p99_ms if p.p99_ms > 0 else float("nan")
            verdict = "meets" if ratio <= bar else "misses"
            lines.append(
                f"p99 transactions / plain, {name} @ {p.offered:,.0f}/s: {t.p99_ms:.1f} / "
                f"{p.p99_ms:.1f} ms = {ratio:.2f} ({verdict} the {bar:g}x bar)"
            )
    return lines


async def variant_latency(
    ctx: Context, variant: str, run_id: str, args: argparse.Namespace
) -> list[LatencyPoint]:
    transactional = variant in ("transactions", "floor-transactions")
    env = variant_env("transactions" if transactional else "plain", run_id, args.rounds)
    if variant.startswith("floor"):
        return await latency_floor(ctx, variant, args.floor_gather_s, transactional, env)
    return await latency_ours(ctx, variant, env)


async def run(args: argparse.Namespace, run_id: str, logdir: Path) -> int:
    say(f"run {run_id}: logs in {logdir}; load average {loadavg()}")
    services = Services(args.database_url, args.bootstrap, own=False)
    backlog = build_template(services, run_id, args.events, args.keys, args.seed)
    ctx = Context(args, services, backlog, run_id, logdir)
    drains: dict[str, list[Drain]] = {v: [] for v in VARIANTS}
    latency: dict[str, list[LatencyPoint]] = {}
    try:
        for round_no in range(args.rounds):
            order = list(reversed(VARIANTS)) if round_no % 2 else list(VARIANTS)
            for variant in order:
                env = variant_env(variant, run_id, round_no)
                d = await drain_relay(ctx, variant, round_no, env)
                drains[variant].append(d)
                say(
                    f"drain {variant} (round {round_no + 1}): {rate(d):,.0f} events/s, load {d.loadavg}"
                )
        for variant in args.latency_variants if args.latency_rates else ():
            latency[variant] = await variant_latency(ctx, variant, run_id, args)
    finally:
        await ctx.close()
    print(
        "\n".join(
            ["", f"Drains of {args.events:,} events, {args.rounds} rounds:", "", *table(drains), ""]
        )
    )
    if latency:
        print("\n".join(["Commit to a read_committed consumer:", "", *latency_table(latency), ""]))
        print("\n".join([*latency_ratios(latency, args.latency_bar), ""]))
    failed = False
    broken = unsound(drains, args.events)
    if broken:
        say(f"FAIL: events lost, reordered or unreadable in the drains of {broken}")
        failed = True
    plain = statistics.median(rate(d) for d in drains["plain"])
    with_tx = statistics.median(rate(d) for d in drains["transactions"])
    if plain and with_tx / plain < args.bar:
        say(f"FAIL: transactions drain {with_tx / plain:.2f} of plain, below {args.bar}")
        failed = True
    say(f"load average {loadavg()}; logs of this run: {logdir}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_in_logdir(
        "relay_transactions", "tx", args.logdir, lambda run_id, logdir: run(args, run_id, logdir)
    )
