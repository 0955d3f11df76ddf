"""`outbox-consumer run module:attribute` runs a ConsumerApp until SIGTERM.

The attribute is a ConsumerApp, or a zero-argument callable returning one (a factory, so
engines are created inside the running event loop). Exit codes: 0 stopped cleanly,
2 the import path or the app is invalid.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import sys
from collections.abc import Sequence
from typing import Any

from consumer_lib.app import ConsumerApp
from consumer_lib.consumer import run_consumer
from consumer_lib.errors import ConsumerConfigError


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


async def _main(target: Any) -> None:
    app = target() if callable(target) and not isinstance(target, ConsumerApp) else target
    if inspect.isawaitable(app):
        app = await app
    if not isinstance(app, ConsumerApp):
        raise ConsumerConfigError(f"expected a ConsumerApp, got {type(app).__name__}")
    await run_consumer(app)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="outbox-consumer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a ConsumerApp until SIGTERM")
    run.add_argument("app", help="module:attribute of a ConsumerApp or a factory returning one")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    args = parser.parse_args(argv)
    from outbox_core import logs

    logs.configure(args.log_level, args.log_json)
    try:
        target = load_app(args.app)
        asyncio.run(_main(target))
    except ConsumerConfigError as exc:
        logging.getLogger("consumer_lib").error("cannot start: %s", exc)
        print(f"outbox-consumer: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
