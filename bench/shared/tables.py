"""The benchmarks' result tables, in Markdown so that a run can be pasted into
docs/benchmarks.md as it is, and the ratio of a contender's rounds to its baseline's."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

PAIRED = "paired ratio = median over rounds of the same round's ratio"


def ratios(rates: Sequence[float], baseline: Sequence[float]) -> tuple[float, float]:
    """Rates measured round by round beside the baseline's, interleaved: the median over the
    baseline's median, and the median of each round's ratio (PAIRED)."""
    paired = statistics.median(v / b for v, b in zip(rates, baseline, strict=True))
    return statistics.median(rates) / statistics.median(baseline), paired


def markdown_table(rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """rows[0] is the header; the first `left` columns are left-aligned, the rest right-aligned,
    every cell padded to its column's width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|".join(("-" * (w + 1)) + (":" if i >= left else "-") for i, w in enumerate(widths))
    return [line(rows[0]), "|" + rule + "|", *(line(row) for row in rows[1:])]
