"""What every bench's command line shares: the parser, the flags several benches take
(where the services are, how long and how fast a load runs, where logs go) and how a bench
ends: a measurement exits 0 whatever it measured, 130 when interrupted and 1 on any error,
which it reports as one line `PROG: Type: message`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from outbox_core.database_url import DatabaseUrl

T = TypeVar("T")
SERVICES_HINT = 'eval "$(.venv/bin/python scripts/services.py env)"'


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A bench's parser: its module docstring as the help, laid out as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)


def numbers(kind: Callable[[str], T]) -> Callable[[str], list[T]]:
    """A comma list of numbers, e.g. --rates 500,2000."""
    return lambda text: [kind(x) for x in text.split(",") if x]


def add_services(p: argparse.ArgumentParser, kafka: bool = True) -> None:
    p.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="the Postgres server the bench's private databases go on (default $DATABASE_URL)",
    )
    if kafka:
        p.add_argument(
            "--bootstrap",
            default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
            help="the Kafka the bench's private topics go on (default $KAFKA_BOOTSTRAP_SERVERS)",
        )


def check_services(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Both services named (flags or environment), the database a Postgres server."""
    missing = [
        f"--{name.replace('_', '-')}"
        for name in ("database_url", "bootstrap")
        if name in args and not getattr(args, name)
    ]
    if missing:
        p.error(f"{' and '.join(missing)} not given and not in the environment: {SERVICES_HINT}")
    if DatabaseUrl.parse(args.database_url).dialect != "postgres":
        p.error("--database-url must be a Postgres URL")


def add_load(
    p: argparse.ArgumentParser,
    *,
    rate: float | None,
    seconds: float,
    warmup_s: float,
    writers: int,
) -> None:
    """A steady load of one event per transaction (bench/shared/steady.py); rate None: the
    bench offers rates of its own."""
    if rate is not None:
        p.add_argument("--rate", type=float, default=rate, help="offered events/s")
    p.add_argument("--seconds", type=float, default=seconds, help="length of each load")
    p.add_argument("--warmup-s", type=float, default=warmup_s, help="left out at a load's start")
    p.add_argument("--writers", type=int, default=writers, help="writer connections (pgbench)")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument("--partitions", type=int, default=6, help="of the private topic")


def add_logdir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--logdir", help="where the relays' logs go (default a /tmp folder)")


def run_guarded(prog: str, call: Callable[[], int]) -> int:
    try:
        return call()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def run_in_logdir(
    prog: str,
    tag: str,
    logdir: str | None,
    run: Callable[[str, Path], Coroutine[Any, Any, int]],
) -> int:
    """run(run_id, logdir) under run_guarded, in --logdir or a fresh /tmp folder named
    with tag and the run's id."""
    run_id = uuid.uuid4().hex[:8]
    folder = Path(logdir or tempfile.mkdtemp(prefix=f"outbox-bench-{tag}-{run_id}-"))
    folder.mkdir(parents=True, exist_ok=True)
    return run_guarded(prog, lambda: asyncio.run(run(run_id, folder)))
