"""bench/shared/plot.py draws the benchmarks' charts with matplotlib, as SVG (text kept as
text) and PNG, the same bytes from the same numbers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from bench.shared import plot

ROOT = Path(__file__).resolve().parents[2]
ROWS = [
    ("ours (defaults)", 500.0, 4.8, 10.3),
    ("ours (defaults)", 2000.0, 5.0, 23.5),
    ("Debezium", 500.0, 482.6, 934.3),
    ("Debezium", 2000.0, 492.1, float("nan")),  # a point not measured is left out
]


def _texts(svg: Path) -> str:
    tree = ET.parse(svg)
    return " ".join("".join(e.itertext()) for e in tree.iter() if e.tag.endswith("text"))


def test_a_latency_chart_is_written_as_svg_and_png(tmp_path: Path) -> None:
    written = plot.latency_plot(tmp_path / "latency.png", ROWS, title="Latency against load")
    assert written == [tmp_path / "latency.svg", tmp_path / "latency.png"]
    assert (tmp_path / "latency.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    texts = _texts(tmp_path / "latency.svg")
    for label in ("Latency against load", "ours (defaults) p99", "Debezium p50", "2,000"):
        assert label in texts, texts
    assert "target: p99 ≤ 50 ms at 2,000/s" in texts


def test_a_timeline_chart_is_written_as_svg_and_png(tmp_path: Path) -> None:
    series = [("B idle", [(0.1 * i, 5.0 + i % 7) for i in range(500)]), ("B fair", [(1.0, 0.0)])]
    written = plot.timeline_plot(
        tmp_path / "timeline.svg", series, "Tenant B", reference=("2 x idle p99 = 22 ms", 22.0)
    )
    assert [p.name for p in written] == ["timeline.svg", "timeline.png"]
    texts = _texts(tmp_path / "timeline.svg")
    for label in ("Tenant B", "B idle", "B fair", "2 x idle p99 = 22 ms"):
        assert label in texts, texts


def test_the_same_numbers_draw_the_same_files(tmp_path: Path) -> None:
    first = [p.read_bytes() for p in plot.latency_plot(tmp_path / "a.svg", ROWS)]
    second = [p.read_bytes() for p in plot.latency_plot(tmp_path / "b.svg", ROWS)]
    assert first == second
