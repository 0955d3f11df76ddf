"""The `outbox-relay` command line.

Exit codes: 0 success, 1 the operation failed (database error, refused migration),
2 bad usage or configuration (nothing was touched).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from producer_lib.connect import DatabaseUrl
from producer_lib.errors import ConfigurationError, OutboxError
from producer_lib.migrate import migrate

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _database_url(value: str | None) -> str:
    url = value or os.environ.get("OUTBOX_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise ConfigurationError(
            "no database: pass --database-url or set OUTBOX_DATABASE_URL (or DATABASE_URL)"
        )
    DatabaseUrl.parse(url)  # fail on a malformed URL before connecting
    return url


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox-relay",
        description="Transactional outbox relay: publishes committed events to Kafka.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    mig = commands.add_parser(
        "migrate",
        help="apply pending schema migrations",
        description="Apply pending migrations once each; safe when several run at once.",
    )
    mig.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (env OUTBOX_DATABASE_URL, then DATABASE_URL)",
    )
    mig.add_argument(
        "--shard-count",
        type=_positive_int,
        metavar="N",
        help="set the shard count producers and relays share (only while nothing is pending)",
    )
    return parser


def _cmd_migrate(args: argparse.Namespace) -> int:
    report = migrate(_database_url(args.database_url), shard_count=args.shard_count)
    applied = ", ".join(f"{v:04d}" for v in report.applied) or "none"
    print(
        f"migrations applied: {applied}; schema version {report.current:04d}; "
        f"shard_count {report.shard_count}"
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return _cmd_migrate(args)
    except ConfigurationError as exc:
        print(f"outbox-relay: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutboxError as exc:
        print(f"outbox-relay: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
