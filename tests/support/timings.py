"""What each test cost: recorded while pytest runs, summed up after the run.

With OUTBOX_TEST_TIMINGS naming a file, the pytest process that reports results (the xdist
controller, or pytest itself without xdist) appends one line per test phase to it.
`python -m tests.support.timings FILE` then prints the slowest tests of every run that
wrote to the file (scripts/test runs pytest twice: the parallel part, then the tests that
stop a shared server) and the time each tier took summed over its tests.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

ENV = "OUTBOX_TEST_TIMINGS"
TIERS = ("unit", "integration", "acceptance", "deployment")


def record(report: pytest.TestReport) -> None:
    """Append `report`'s duration when this process is the one that reports results."""
    path = os.environ.get(ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{report.nodeid}\t{report.when}\t{report.duration:.3f}\t{report.outcome}\n")


def read(path: Path) -> dict[str, float]:
    """Per test, its setup, call and teardown added up; lines not written by record() are
    skipped."""
    totals: dict[str, float] = defaultdict(float)
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        try:
            totals[parts[0]] += float(parts[2])
        except ValueError:
            continue
    return dict(totals)


def tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS else "other"


def summary(totals: dict[str, float], slowest: int) -> list[str]:
    lines = [
        f"slowest {min(slowest, len(totals))} of {len(totals)} tests (setup + call + teardown):"
    ]
    ranked = sorted(totals.items(), key=lambda item: item[1], reverse=True)
    lines += [f"{seconds:8.1f}s  {nodeid}" for nodeid, seconds in ranked[:slowest]]
    by_tier: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in totals.items():
        by_tier[tier(nodeid)].append(seconds)
    lines.append("per tier, summed over its tests (workers run them side by side):")
    for name in (*TIERS, "other"):
        if by_tier.get(name):
            spent = by_tier[name]
            lines.append(f"{name:>12}: {len(spent):5d} tests {sum(spent):8.1f}s")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.timings", description=__doc__)
    parser.add_argument("file", type=Path, help="the file OUTBOX_TEST_TIMINGS named")
    parser.add_argument("--slowest", type=int, default=30, help="how many tests to list")
    args = parser.parse_args(argv)
    if args.slowest < 1:
        parser.error("--slowest must be at least 1")
    if not args.file.exists():
        print(f"no timings recorded in {args.file}", file=sys.stderr)
        return 1
    print("\n".join(summary(read(args.file), args.slowest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
