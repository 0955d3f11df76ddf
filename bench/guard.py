"""How the benchmark scripts end: a measurement exits 0 whatever it measured, 130 when
interrupted and 1 on any error, which it reports as one line `PROG: Type: message`."""

from __future__ import annotations

import sys
from collections.abc import Callable


def run_guarded(prog: str, call: Callable[[], int]) -> int:
    try:
        return call()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
