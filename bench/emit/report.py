"""bench/emit_overhead.py's report: each variant's tx/s over the rounds and its ratio to its
baseline, as a Markdown table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.shared.tables import PAIRED, markdown_table, ratios


@dataclass(frozen=True)
class Result:
    name: str
    baseline: str
    tps: list[float]  # one per round

    @property
    def median(self) -> float:
        return statistics.median(self.tps)


def ratio(result: Result, by_name: dict[str, Result]) -> float | None:
    return ratios(result.tps, by_name[result.baseline].tps)[0] if result.baseline else None


def print_table(results: Sequence[Result], clients: int) -> None:
    """A Markdown table, so that a run can be pasted into docs/benchmarks.md as it is."""
    by_name = {r.name: r for r in results}
    rows = [
        (
            "variant",
            "median tx/s",
            "min tx/s",
            "max tx/s",
            "ms/tx",
            "added ms/tx",
            "ratio",
            "overhead",
            "paired ratio",
        )
    ]
    for r in results:
        ms = 1000.0 * clients / r.median
        if not r.baseline:
            extra = ("", "", "", "")
        else:
            rat, pair = ratios(r.tps, by_name[r.baseline].tps)
            added = ms - 1000.0 * clients / by_name[r.baseline].median
            extra = (f"{added:+.3f}", f"{rat:.3f}", f"{1 - rat:.1%}", f"{pair:.3f}")
        rows.append(
            (
                r.name,
                f"{r.median:.1f}",
                f"{min(r.tps):.1f}",
                f"{max(r.tps):.1f}",
                f"{ms:.3f}",
                *extra,
            )
        )
    print("\n".join(markdown_table(rows, left=1)))
    print()
    print(f"ratio = median tx/s / its baseline's median tx/s; overhead = 1 - ratio; {PAIRED}")
    print(
        "ms/tx = wall time per transaction"
        + (f" per client ({clients} clients / tx/s)" if clients > 1 else "")
    )
