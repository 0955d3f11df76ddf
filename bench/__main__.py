"""`python -m bench NAME [args]` runs a bench; `python -m bench` (or `list`) lists them with
the question each answers and the section of docs/benchmarks.md it feeds."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from bench.registry import BENCHES, BY_NAME


def listing() -> str:
    lines = ["python -m bench NAME [--help | args]", ""]
    for bench in BENCHES:
        lines += [bench.name, f"    {bench.question}", f"    {bench.docs}"]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("list", "-h", "--help"):
        print(listing())
        return 0
    bench = BY_NAME.get(argv[0])
    if bench is None:
        print(f"python -m bench: no bench {argv[0]!r}\n\n{listing()}", file=sys.stderr)
        return 2
    code: int = importlib.import_module(f"bench.{bench.name}").main(list(argv[1:]))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
