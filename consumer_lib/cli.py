"""`outbox-consumer run module:attribute` runs a ConsumerApp until SIGTERM.

The attribute is a ConsumerApp, or a zero-argument callable returning one (a factory, so
engines are created inside the running event loop). Exit codes: 0 stopped cleanly,
2 the import path or the app is invalid.

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
from typing import Any

from consumer_lib.app import ConsumerApp
from consumer_lib.consumer import run_consumer
from consumer_lib.errors import ConsumerConfigError
from outbox_core import logs


def load_app(path: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConsumerConfigError(f"{path!r} is not module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConsumerConfigError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConsumerConfigError(f"{module_name!r} has no attribute {attr!r}") from None


def app_secrets(app: ConsumerApp) -> list[str]:
    """The values of the app that must never be logged."""
    security = app.settings.security
    found = (
        [s for s in (security.sasl_password, security.ssl_key_password) if s] if security else []
    )
    database_secrets = getattr(app.database, "secrets", None)
    if callable(database_secrets):
        found += database_secrets()
    return found


async def _main(target: Any) -> None:
    app = target() if callable(target) and not isinstance(target, ConsumerApp) else target
    if inspect.isawaitable(app):
        app = await app
    if not isinstance(app, ConsumerApp):
        raise ConsumerConfigError(f"expected a ConsumerApp, got {type(app).__name__}")
    logs.add_secrets(app_secrets(app))
    await run_consumer(app)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="outbox-consumer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a ConsumerApp until SIGTERM")
    run.add_argument("app", help="module:attribute of a ConsumerApp or a factory returning one")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    args = parser.parse_args(argv)
    environment = [os.environ.get(n) for n in ("DATABASE_URL", "OUTBOX_DATABASE_URL")]
    logs.configure(
        args.log_level, args.log_json, [s for url in environment for s in logs.url_secrets(url)]
    )
    try:
        target = load_app(args.app)
        asyncio.run(_main(target))
    except ConsumerConfigError as exc:
        logging.getLogger("consumer_lib").error("cannot start: %s", exc)
        print("outbox-consumer: " + logs.redact(str(exc)), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
