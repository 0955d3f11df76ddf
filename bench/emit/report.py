"""bench/emit_overhead.py's report: each variant's tx/s over the rounds and its ratio to its
baseline, as a Markdown table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.markdown_table import markdown_table


@dataclass(frozen=True)
class Result:
    name: str
    baseline: str
    tps: list[float]  # one per round

    @property
    def median(self) -> float:
        return statistics.median(self.tps)


def ratio(result: Result, by_name: dict[str, Result]) -> float | None:
    if not result.baseline:
        return None
    return result.median / by_name[result.baseline].median


def paired_ratio(result: Result, by_name: dict[str, Result]) -> float | None:
    """Median over rounds of this round's tx/s over its baseline's in the same round."""
    if not result.baseline:
        return None
    base = by_name[result.baseline].tps
    return statistics.median(v / b for v, b in zip(result.tps, base, strict=True))


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
        rat = ratio(r, by_name)
        pair = paired_ratio(r, by_name)
        if rat is None or pair is None:
            extra = ("", "", "", "")
        else:
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
    print(
        "ratio = median tx/s / its baseline's median tx/s; overhead = 1 - ratio; "
        "paired ratio = median over rounds of the same round's ratio"
    )
    print(
        "ms/tx = wall time per transaction"
        + (f" per client ({clients} clients / tx/s)" if clients > 1 else "")
    )
