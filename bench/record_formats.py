"""The relay's record formats: its debezium records against Debezium's own, and its drain in
each format against native's.

    .venv/bin/python -m bench record_formats                    # both parts
    .venv/bin/python -m bench record_formats --parts compare --compare-events 200
    .venv/bin/python -m bench record_formats --parts drain --events 20000 --rounds 1

compare: producer_lib emits --compare-events events of every payload kind into a private
database on a Postgres with wal_level=logical (--debezium-database-url, default one of this
run's own, started with scripts/services.py in a temporary folder on a free port and
removed afterwards); Debezium's Postgres connector with its outbox EventRouter (Kafka
Connect standalone, fetched from Maven Central into --cache-dir the first time) and then
the relay with OUTBOX_RECORD_FORMAT=debezium publish them under two topic prefixes; both
are read whole and matched by event id, and topic, key, value and every header Debezium
set are compared (bench/formats/debezium_match.py). Exits 1 on any difference.

drain: producer_lib writes --events order events (~300-byte JSON, --keys keys) once into a
template database on --database-url; each drain gets a copy and a fresh topic, and
`python -m relay.cli run` (defaults, but the format's settings) drains it once per format in
each round, the order reversed every other round; events/s over the drain, the ratio to
native's, and the whole topic audited: lost, duplicated, out of order (bench/compare/).
Exits 1 when a drain lost or reordered events; which format is faster is the measurement.

Kafka is --bootstrap's for both parts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.compare.backlog import build_template
from bench.compare.common import BENCH_CACHE, say
from bench.compare.context import Context
from bench.compare.debezium import connect_libs
from bench.compare.services import Services, logical_postgres
from bench.formats.debezium_match import match_debezium
from bench.formats.drains import drain_formats, unsound
from bench.formats.report import drain_table, match_table
from bench.formats.settings import BASELINE, FORMATS
from bench.shared.cli import add_logdir, add_services, check_services, parser, run_in_logdir
from bench.shared.procstat import loadavg

PARTS = ("compare", "drain")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    p.add_argument(
        "--compare-events", type=int, default=2000, help="events Debezium and the relay publish"
    )
    p.add_argument(
        "--debezium-database-url",
        default=None,
        help="a Postgres server with wal_level=logical for the comparison (default: one of\n"
        "this run's own, started in a temporary folder and removed afterwards)",
    )
    p.add_argument(
        "--cache-dir",
        default=os.environ.get("OUTBOX_BENCH_CACHE_DIR", str(BENCH_CACHE)),
        help="where Kafka Connect and Debezium are fetched to, once",
    )
    p.add_argument("--events", type=int, default=100_000, help="the drain's backlog")
    p.add_argument("--rounds", type=int, default=3, help="drains per format (median reported)")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4, help="of every private topic")
    p.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help=f"comma list of {', '.join(FORMATS)}; {BASELINE} always drains (the baseline)",
    )
    p.add_argument("--seed", type=int, default=1)
    add_logdir(p)
    args = p.parse_args(argv)
    check_services(p, args)
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not args.parts or not set(args.parts) <= set(PARTS):
        p.error(f"--parts takes a comma list of {', '.join(PARTS)}")
    formats = {x.strip() for x in args.formats.split(",") if x.strip()}
    if not formats <= set(FORMATS):
        p.error(f"--formats takes a comma list of {', '.join(FORMATS)}")
    args.formats = [f for f in FORMATS if f in formats | {BASELINE}]
    if args.compare_events < 1 or args.events < 1000 or args.rounds < 1 or args.partitions < 1:
        p.error("--compare-events, --rounds and --partitions must be at least 1, --events 1000")
    return args


@contextlib.contextmanager
def logical_server(args: argparse.Namespace) -> Iterator[str]:
    if args.debezium_database_url:
        yield args.debezium_database_url
    else:
        with logical_postgres() as url:
            yield url


async def run(args: argparse.Namespace, run_id: str, logdir: Path) -> int:
    say(f"run {run_id}: logs in {logdir}; load average {loadavg()}")
    failed = False
    if "compare" in args.parts:
        libs = connect_libs(Path(args.cache_dir))
        with logical_server(args) as server:
            match = await match_debezium(
                server, args.bootstrap, libs, args.compare_events, args.partitions, args.seed,
                run_id, logdir,
            )  # fmt: skip
        print(
            "\n".join(
                [
                    "",
                    "Debezium's EventRouter against the relay's debezium format:",
                    "",
                    *match_table(match),
                    "",
                ]
            )
        )
        if not match.ok:
            say("FAIL: the relay's debezium records differ from Debezium's")
            failed = True
    if "drain" in args.parts:
        services = Services(args.database_url, args.bootstrap, own=False)
        backlog = build_template(services, run_id, args.events, args.keys, args.seed)
        ctx = Context(args, services, backlog, run_id, logdir)
        try:
            drains = await drain_formats(ctx, args.formats, args.rounds)
        finally:
            await ctx.close()
        print(
            "\n".join(
                [
                    "",
                    f"Drains of {args.events:,} events per format, {args.rounds} rounds:",
                    "",
                    *drain_table(drains),
                    "",
                ]
            )
        )
        broken = unsound(drains, args.events)
        if broken:
            say(f"FAIL: events lost, reordered or unreadable in the drains of {broken}")
            failed = True
    say(f"load average {loadavg()}; logs of this run: {logdir}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_in_logdir(
        "record_formats", "formats", args.logdir, lambda run_id, logdir: run(args, run_id, logdir)
    )
