"""bench/plot.py draws the benchmarks' charts with matplotlib, as SVG (text kept as text)
and PNG, the same bytes from the same numbers; the docs' latency charts are the ones the
recorded numbers in bench/data draw; a malformed data file is refused with its row."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import plot

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


@pytest.mark.parametrize(
    ("data", "chart", "args"),
    [
        ("relay_latency.csv", "relay_latency.svg", []),
        (
            "relay_latency_commit.csv",
            "relay_latency_commit.svg",
            ["--target-ms", "25", "--no-target-at", "--title",
             "Commit to Kafka latency against offered load"],
        ),
    ],
)  # fmt: skip
def test_the_docs_charts_are_drawn_from_the_recorded_numbers(
    tmp_path: Path, data: str, chart: str, args: list[str]
) -> None:
    """The command in each data file's header redraws the committed chart exactly."""
    header = (ROOT / "bench" / "data" / data).read_text()
    assert f"bench/data/{data} docs/img/{chart}" in header
    assert (
        plot.main(["latency", str(ROOT / "bench" / "data" / data), str(tmp_path / chart), *args])
        == 0
    )
    assert (tmp_path / chart).read_bytes() == (ROOT / "docs" / "img" / chart).read_bytes()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("series,offered,p50_ms,p99_ms\nours,500,4.8,ten\n", "bad row"),
        ("series,offered,p50_ms\nours,500,4.8\n", "bad row"),
        ("series,offered,p50_ms,p99_ms\nours,500\n", "bad row"),
        ("# only notes\n", "no rows"),
        ("", "no rows"),
    ],
)
def test_a_malformed_data_file_is_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "data.csv"
    path.write_text(text)
    with pytest.raises(SystemExit, match=says):
        plot.read_latency_csv(path)
