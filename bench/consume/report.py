"""bench/consumer_throughput.py's report: each contender's events/s over the rounds and its
ratio to the plain consumer on the same topic, as a Markdown table, and the client's
versions."""

from __future__ import annotations

import contextlib
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from bench.consume.contenders import BASELINE
from bench.shared.tables import PAIRED, markdown_table, ratios


@dataclass
class Result:
    partitions: int
    name: str
    rates: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def print_table(results: Sequence[Result]) -> None:
    """A Markdown table, to paste into docs/benchmarks.md as it is."""
    base = {r.partitions: r for r in results if r.name == BASELINE}
    rows = [
        (
            "partitions",
            "contender",
            "median ev/s",
            "min ev/s",
            "max ev/s",
            "ms/event",
            "ratio to plain",
            "paired ratio",
        )
    ]
    for r in results:
        ratio, paired = ratios(r.rates, base[r.partitions].rates)
        rows.append(
            (
                str(r.partitions),
                r.name,
                f"{r.median:.0f}",
                f"{min(r.rates):.0f}",
                f"{max(r.rates):.0f}",
                f"{1000 / r.median:.3f}",
                f"{ratio:.3f}",
                f"{paired:.3f}",
            )
        )
    print("\n".join(markdown_table(rows, left=2)))
    print()
    print(f"ratio to plain = median ev/s / plain's median ev/s on the same topic; {PAIRED}")


def versions() -> str:
    names = ("aiokafka", "psycopg", "psycopg-pool", "SQLAlchemy")
    found = []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{name} {metadata.version(name)}")
    return f"Python {platform.python_version()}, " + ", ".join(found)
