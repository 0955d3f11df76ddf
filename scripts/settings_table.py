"""Print a settings table as docs show it: the relay's (the end of docs/relay.md) or, with
`consumer`, outbox-consumer's (the end of docs/consumer.md). Regenerate them with this."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay.config import field_help


def _rows(rows: Iterable[tuple[str, str, str, str]]) -> str:
    lines = ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for flag, env, text, default in rows:
        lines.append(f"| `{flag}` | `{env}` | `{default}` | {text} |")
    return "\n".join(lines) + "\n"


def table() -> str:
    return _rows(field_help())


def consumer_table() -> str:
    from consumer_lib.environment import ENV_PREFIX, settings_fields

    return _rows(
        (f.flag, f.env(ENV_PREFIX), f.info.description or "", f.default_text)
        for f in settings_fields()
    )


if __name__ == "__main__":
    print(consumer_table() if sys.argv[1:] == ["consumer"] else table(), end="")
