"""Print the relay settings as the Markdown table in docs/relay.md (regenerate it with this)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay.config import field_help


def table() -> str:
    lines = ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for flag, env, text, default in field_help():
        lines.append(f"| `{flag}` | `{env}` | `{default}` | {text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
