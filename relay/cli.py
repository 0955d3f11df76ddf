"""The `outbox-relay` command line.

Exit codes: 0 success, 1 the operation failed (database error, refused migration),
2 bad usage or configuration, or a confirmation needed without a terminal (nothing was
touched), 3 some ids given or listed were not found or not eligible (the others were acted
on; relay.ops.cli_admin.EXIT_MISSING), 4 declined at the confirmation prompt
(EXIT_DECLINED), 5 `run` stopped because its producer cannot be started again (a
non-retriable error: its leases were released for the other replicas; a restart may
succeed, e.g. once a permission is granted). docs/relay.md, "Operator commands", says the
same to users.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from outbox_core import logs
from outbox_core.database_url import DatabaseUrl
from outbox_core.distribution import version
from outbox_core.errors import ConfigurationError, OutboxError
from outbox_core.migrate import migrate
from outbox_core.pg_session import POOLERS, Pooler
from outbox_core.settings import add_flags
from relay.config import (
    ENV_PREFIX,
    load_settings,
    settings_fields,
    unknown_env_names,
)
from relay.database import read_url_file
from relay.errors import PublishingStopped, RelayConfigError, StartupRefused
from relay.ops import cli_admin

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANNOT_PUBLISH = 5


def _database_url(value: str | None) -> str:
    url = value or _url_from_file() or os.environ.get("OUTBOX_DATABASE_URL")
    url = url or os.environ.get("DATABASE_URL")
    if not url:
        raise ConfigurationError(
            "no database: set OUTBOX_DATABASE_URL_FILE or OUTBOX_DATABASE_URL (or "
            "DATABASE_URL), or pass --database-url"
        )
    # Driver errors may quote parts of the URL (libpq echoes an undecodable password):
    # whatever this command prints is redacted against it.
    logs.add_secrets(logs.url_secrets(url))
    DatabaseUrl.parse(url)  # fail on a malformed URL before connecting
    return url


def _url_from_file() -> str | None:
    path = os.environ.get("OUTBOX_DATABASE_URL_FILE")
    if not path:
        return None
    try:
        return read_url_file(path)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _add_database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (better: env OUTBOX_DATABASE_URL_FILE, "
        "OUTBOX_DATABASE_URL, then DATABASE_URL: a flag is visible to every local user)",
    )
    parser.add_argument(
        "--database-pooler",
        metavar="MODE",
        help="none or transaction: a transaction pooler (PgBouncer pool_mode=transaction) "
        "sits in front of Postgres [env OUTBOX_DATABASE_POOLER; default none]",
    )


def _pooler(args: argparse.Namespace) -> Pooler:
    value = getattr(args, "database_pooler", None) or os.environ.get("OUTBOX_DATABASE_POOLER")
    for pooler in POOLERS:
        if (value or "none").strip().lower() == pooler:
            return pooler
    raise ConfigurationError(
        f"database_pooler must be one of {', '.join(POOLERS)} (OUTBOX_DATABASE_POOLER, "
        "--database-pooler)"
    )


class _Parser(argparse.ArgumentParser):
    """Usage errors echo the arguments (`unrecognized arguments: --databse-url postgresql://
    user:password@...`): they are redacted like every other line. Subcommands inherit it."""

    def _print_message(self, message: str, file: Any = None) -> None:
        super()._print_message(logs.redact(message), file)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="outbox-relay",
        description="Transactional outbox relay: publishes committed events to Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"outbox-relay {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    mig = commands.add_parser(
        "migrate",
        help="apply pending schema migrations",
        description="Apply pending migrations once each; safe when several run at once.",
    )
    _add_database(mig)
    mig.add_argument(
        "--shard-count",
        type=_positive_int,
        metavar="N",
        help="set the shard count producers and relays share (only while nothing is pending)",
    )
    cli_admin.add_commands(commands, _add_database)
    run = commands.add_parser(
        "run",
        help="publish pending events to Kafka until SIGTERM",
        description="Run the relay. Every flag can also be set by the environment variable "
        "shown; flags win. Secrets (the database URL) are never printed.",
    )
    add_flags(run, settings_fields(), ENV_PREFIX)
    return parser


def _run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for field in settings_fields():
        value = getattr(args, field.name, None)
        if value is None:
            continue
        # Text that is not a JSON document is left to the field's own parsing (the
        # name=weight pairs of tenant_weights), as the environment's is.
        if field.is_json and isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise RelayConfigError(f"{field.flag}: not valid JSON: {exc}") from None
        overrides[field.name] = value
    return overrides


# The garbage collector settings of the relay's own process (`outbox-relay run`).
#
# A drain keeps thousands of rows and records alive across the awaits of a cycle, so with
# CPython's defaults (a young collection every 700 net allocations) they survived into the
# oldest generation, and a full collection ran about once a second over the whole heap,
# finding nothing to free: 80-100 ms each (measured with gc.callbacks during a 300k-event
# drain), a stall of the event loop that every lane waited out, and CPU the relay spent on
# nothing. The relay makes few reference cycles (rows, records and acks are freed by
# reference counting when their cycle ends), so:
#
# - the start-up heap (modules, settings, clients) is frozen: no collection walks it again;
# - a young collection runs every YOUNG allocations net of frees, more than a cycle keeps
#   alive at once, so a cycle's objects are mostly freed before any collection sees them.
#
# Applied only by the command, never by RelayService itself: a host process that embeds the
# service keeps its own collector settings.
YOUNG = 50_000  # net allocations between young collections (CPython's default: 700)
OLDER = 20  # collections of a generation between collections of the next one (10)


def tune_collector() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG, OLDER, OLDER)


def _secret_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The flags given that carry a secret, each with what to use instead."""
    if args.command != "run":
        url = getattr(args, "database_url", None)
        instead = "OUTBOX_DATABASE_URL_FILE or OUTBOX_DATABASE_URL"
        return [("--database-url", instead)] if _has_password(url) else []
    fields = settings_fields()
    names = {field.name for field in fields}
    found = []
    for field in fields:
        value = getattr(args, field.name, None)
        if value is None:
            continue
        if field.name.endswith("url"):
            secret = _has_password(value)  # a database file's path is no secret
        else:
            secret = "SecretStr" in str(field.info.annotation)
        if secret:
            instead = field.env(ENV_PREFIX)
            if f"{field.name}_file" in names:
                instead += f" or {ENV_PREFIX}{field.name.upper()}_FILE"
            found.append((field.flag, instead))
    return found


def _has_password(url: object) -> bool:
    return isinstance(url, str) and bool(logs.url_secrets(url)[1:])


def _warn_secret_flags(args: argparse.Namespace) -> None:
    for flag, instead in _secret_flags(args):
        print(
            f"outbox-relay: warning: {flag} puts a secret on the command line, where other "
            f"users of this machine can read it (ps, /proc/<pid>/cmdline); set {instead} "
            "instead",
            file=sys.stderr,
        )


def _cmd_run(args: argparse.Namespace) -> int:
    from relay.service import RelayService

    for url in (getattr(args, "database_url", None), os.environ.get("OUTBOX_DATABASE_URL")):
        logs.add_secrets(logs.url_secrets(url))  # before validation, which may fail
    settings = load_settings(**_run_overrides(args))
    logs.configure(settings.log.level, settings.log.json_lines, settings.secrets())
    unknown = unknown_env_names()
    if unknown:
        logging.getLogger("relay").warning(
            "environment variables that name no setting are ignored", extra={"names": unknown}
        )

    async def main() -> None:
        service = RelayService(settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.stop)
        await service.run()

    tune_collector()  # once the modules and settings are loaded: they are frozen
    asyncio.run(main())
    return EXIT_OK


def _cmd_migrate(args: argparse.Namespace) -> int:
    if _pooler(args) == "transaction":
        # Migrators queue on a session advisory lock; through a transaction pooler the lock
        # and its unlock land on different server connections, and the lock is never freed.
        raise ConfigurationError(
            "migrate needs a direct connection to Postgres, not one through a transaction "
            "pooler: give it the server's own URL (--database-url), without "
            "OUTBOX_DATABASE_POOLER=transaction (docs/poolers.md)"
        )
    report = migrate(_database_url(args.database_url), shard_count=args.shard_count)
    applied = ", ".join(f"{v:04d}" for v in report.applied) or "none"
    if report.adopted:
        adopted = ", ".join(f"{v:04d}" for v in report.adopted)
        print(f"migrations found already in the schema and recorded: {adopted}")
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
    logs.install_excepthook()  # an unexpected traceback is redacted too
    _warn_secret_flags(args)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "migrate":
            return _cmd_migrate(args)
        args.database_pooler = _pooler(args)
        return cli_admin.run(args, _database_url(args.database_url))
    except (ConfigurationError, RelayConfigError) as exc:
        print("outbox-relay: " + logs.redact(f"configuration error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except StartupRefused as exc:
        print("outbox-relay: " + logs.redact(f"refusing to start: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except PublishingStopped as exc:
        print("outbox-relay: " + logs.redact(f"cannot publish: {exc}"), file=sys.stderr)
        return EXIT_CANNOT_PUBLISH
    except OutboxError as exc:
        print("outbox-relay: " + logs.redact(f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
