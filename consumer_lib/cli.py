"""`outbox-consumer run module:attribute` runs a ConsumerApp until SIGTERM.

The attribute is a ConsumerApp, or a zero-argument callable returning one (a factory, so
engines are created inside the running event loop). The app directory (--app-dir, the
working directory by default) is put first on sys.path, so a service's own package
imports without being installed. Settings flags (--group-id, --kafka-security-protocol,
...) mirror the OUTBOX_CONSUMER_* variables and reach the app through
ConsumerSettings.from_env(). Exit codes: 0 stopped cleanly, 2 the import path, the app or
its configuration is invalid.

Secrets stay in the app (its settings and database) or the environment, never on this
command line. Every log line is redacted against the app's secrets (its database URL and
password, the Kafka SASL and key passwords) and the database URLs in the environment
(DATABASE_URL, OUTBOX_DATABASE_URL), as the relay's are.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from consumer_lib.app import ConsumerApp
from consumer_lib.consumer import run_consumer
from consumer_lib.environment import (
    ENV_PREFIX,
    env_names_set,
    flags_given,
    flags_used,
    set_flags,
    settings_fields,
    unknown_env_names,
)
from consumer_lib.errors import ConsumerConfigError
from outbox_core import logs
from outbox_core.distribution import version
from outbox_core.settings import add_flags

log = logging.getLogger("consumer_lib")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_app_dir(app_dir: str) -> str:
    """Put app_dir first on sys.path (as uvicorn does); returns the absolute path."""
    path = Path(app_dir)
    if not path.is_dir():
        raise ConsumerConfigError(f"--app-dir {app_dir!r} is not a directory")
    resolved = str(path.resolve())
    if resolved not in sys.path:
        sys.path.insert(0, resolved)
    return resolved


def app_secrets(app: ConsumerApp) -> list[str]:
    """The values of the app that must never be logged."""
    security = app.settings.security
    found = [s for s in (security.sasl_password, security.ssl_key_password) if s]
    database_secrets = getattr(app.database, "secrets", None)
    if callable(database_secrets):
        found += database_secrets()
    return found


def load_app(path: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConsumerConfigError(f"{path!r} is not module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConsumerConfigError(
            f"cannot import {module_name!r}: {exc} (looked in --app-dir and sys.path)"
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConsumerConfigError(f"{module_name!r} has no attribute {attr!r}") from None


async def _main(target: Any) -> None:
    app = await _resolve(target)
    logs.add_secrets(app_secrets(app))
    await run_consumer(app)


async def _resolve(target: Any) -> ConsumerApp:
    app = target() if callable(target) and not isinstance(target, ConsumerApp) else target
    if inspect.isawaitable(app):
        app = await app
    if not isinstance(app, ConsumerApp):
        raise ConsumerConfigError(f"expected a ConsumerApp, got {type(app).__name__}")
    _check_settings_reached(app)
    return app


def _check_settings_reached(app: ConsumerApp) -> None:
    """Flags and OUTBOX_CONSUMER_* variables only act through ConsumerSettings.from_env():
    given to an app whose settings are written in code, they would be ignored silently."""
    if flags_used():
        return
    given = flags_given()
    if given:
        raise ConsumerConfigError(
            f"settings flags were given ({', '.join(given)}) but the app's "
            "ConsumerSettings were not made by ConsumerSettings.from_env(): they would be ignored"
        )
    named = env_names_set()
    if named:
        log.warning(
            "OUTBOX_CONSUMER_* variables are set but the app's settings do not come from "
            "ConsumerSettings.from_env(): they are ignored",
            extra={"names": named},
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox-consumer", description="Apply Kafka events exactly once (consumer_lib)."
    )
    parser.add_argument("--version", action="version", version=f"outbox-consumer {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a ConsumerApp until SIGTERM",
        description="Run a ConsumerApp. Settings flags mirror the environment variables "
        "shown (flags win) and reach the app through ConsumerSettings.from_env().",
    )
    run.add_argument("app", help="module:attribute of a ConsumerApp or a factory returning one")
    run.add_argument(
        "--app-dir",
        default=".",
        metavar="DIR",
        help="directory put first on sys.path to import the app from [default: .]",
    )
    run.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help=f"log level [env {ENV_PREFIX}LOG_LEVEL; default INFO]",
    )
    run.add_argument(
        "--log-json",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"one JSON object per log line [env {ENV_PREFIX}LOG_JSON; default False]",
    )
    add_flags(run, settings_fields(), ENV_PREFIX)
    return parser


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        field.name: getattr(args, field.name)
        for field in settings_fields()
        if getattr(args, field.name, None) is not None
    }


def _logging(args: argparse.Namespace) -> tuple[str, bool]:
    """The log level and format: the flags, else OUTBOX_CONSUMER_LOG_LEVEL / _LOG_JSON."""
    level = args.log_level or os.environ.get(f"{ENV_PREFIX}LOG_LEVEL", "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConsumerConfigError(f"{ENV_PREFIX}LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    if args.log_json is not None:
        return level, bool(args.log_json)
    text = os.environ.get(f"{ENV_PREFIX}LOG_JSON", "false").strip().lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise ConsumerConfigError(f"{ENV_PREFIX}LOG_JSON must be true or false")
    return level, text in ("true", "1", "yes")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        level, json_lines = _logging(args)
    except ConsumerConfigError as exc:
        print(f"outbox-consumer: {exc}", file=sys.stderr)
        return 2
    environment = [os.environ.get(n) for n in ("DATABASE_URL", "OUTBOX_DATABASE_URL")]
    logs.configure(level, json_lines, [s for url in environment for s in logs.url_secrets(url)])
    set_flags(_flags(args))
    unknown = unknown_env_names()
    if unknown:
        log.warning(
            "environment variables that name no setting are ignored", extra={"names": unknown}
        )
    try:
        add_app_dir(args.app_dir)
        target = load_app(args.app)
        asyncio.run(_main(target))
    except ConsumerConfigError as exc:
        log.error("cannot start: %s", exc)
        print("outbox-consumer: " + logs.redact(str(exc)), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
