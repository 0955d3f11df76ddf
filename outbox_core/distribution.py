"""The distribution: its version, its extras and which modules each needs, and the one-line
error when an extra is absent.

`pip install outbox-relay` is the producer's install; the relay and the consumer need
packages a producer-only service should not carry, installed with an extra. Their packages
call `require(...)` first, so a missing extra is named (and how to install it) instead of
surfacing as an ImportError from deep inside.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib import metadata

DISTRIBUTION = "outbox-relay"

# Import names of what each extra installs (the pyproject lists are the distributions).
EXTRAS: dict[str, tuple[str, ...]] = {
    "relay": (
        "aiokafka",
        "psycopg_pool",
        "tenacity",
        "pydantic",
        "pydantic_settings",
        "prometheus_client",
    ),
    "consumer": (
        "aiokafka",
        "psycopg_pool",
        "tenacity",
        "pydantic",
        "pydantic_settings",
        "prometheus_client",
    ),
}

# The console script of each extra: run without it, the script prints one line and exits 2.
_COMMANDS = {"relay": "outbox-relay", "consumer": "outbox-consumer"}
EXIT_USAGE = 2


class MissingExtra(ImportError):
    """A part of the distribution was imported without the extra it needs."""

    def __init__(self, extra: str, part: str, missing: list[str]) -> None:
        self.extra = extra
        self.missing = missing
        super().__init__(
            f"{DISTRIBUTION}: the {part} needs the '{extra}' extra: "
            f"pip install '{DISTRIBUTION}[{extra}]' (missing: {', '.join(missing)})"
        )


def version() -> str:
    """The installed distribution's version (pyproject.toml is the one place it is written)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"  # run from a source tree that was never installed


def missing_modules(extra: str) -> list[str]:
    return [name for name in EXTRAS[extra] if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a finder that refuses it (a broken or partial install)
        return False


def _running_command() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    return os.path.basename(path or "") or None


def require(extra: str, part: str) -> None:
    """Raise MissingExtra when a module of `extra` is not installed. Under the extra's own
    console script the message is printed as one line and the process exits with 2."""
    missing = missing_modules(extra)
    if not missing:
        return
    error = MissingExtra(extra, part, missing)
    if _running_command() == _COMMANDS.get(extra):
        print(error, file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    raise error
