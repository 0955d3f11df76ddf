"""The benchmarks' charts, drawn with matplotlib (the `bench` extra): latency against
offered load, and latency over time. Each chart is written twice, as SVG (what the docs
embed: text stays text) and PNG, whichever of the two suffixes the path given has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

TARGET_COLOR = "#c82828"
SIZE_IN = (9.6, 6.0)
DPI = 100


def _figure() -> tuple[Figure, Axes]:
    # Figure, not pyplot: no global state and no display backend, in any process.
    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    ax.grid(True, which="major", color="#d7d7d7", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def _ms_axis(ax: Axes) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_ylabel("latency (ms, log scale)")


def _legend(fig: Figure, ax: Axes, markerscale: float = 1.0) -> None:
    """Below the axes, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3),
               fontsize="small", markerscale=markerscale, frameon=False)  # fmt: skip


def outputs(path: Path) -> list[Path]:
    """The files a chart is written to: the path as given and its twin (.svg and .png)."""
    return [path.with_suffix(".svg"), path.with_suffix(".png")]


def _save(fig: Figure, path: Path) -> list[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    written = outputs(path)
    # SVG text as <text> (searchable, small), ids from a fixed salt and no creation date:
    # a chart redrawn from the same numbers is the same file.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "outbox-bench"}):
        for out in written:
            metadata = {"Date": None} if out.suffix == ".svg" else {"Software": None}
            fig.savefig(out, metadata=metadata)
    return written


def _finite(value: float) -> bool:
    return value > 0 and math.isfinite(value)


def latency_plot(
    path: Path,
    rows: Sequence[tuple[str, float, float, float]],
    target_ms: float | None = 50.0,
    target_at: float | None = 2000.0,
    title: str = "End-to-end latency (commit to consumer) against offered load",
) -> list[Path]:
    """rows: (series label, offered events/s, p50 ms, p99 ms); p99 solid, p50 dashed, on a
    log-scale latency axis. Returns the files written."""
    fig, ax = _figure()
    names = list(dict.fromkeys(r[0] for r in rows))  # first-seen order
    colors = [f"C{n}" for n in range(len(names))]
    for name, color in zip(names, colors, strict=True):
        points = sorted((r[1], r[2], r[3]) for r in rows if r[0] == name)
        for index, style, kind in ((2, "-", "p99"), (1, "--", "p50")):
            shown = [(p[0], p[index]) for p in points if _finite(p[index])]
            if shown:
                xs, ys = zip(*shown, strict=True)
                ax.plot(xs, ys, style, marker="s" if kind == "p99" else "o", color=color,
                        linewidth=2, markersize=5, label=f"{name} {kind}")  # fmt: skip
    if target_ms is not None:
        note = f"target: p99 ≤ {target_ms:g} ms" + (f" at {target_at:,.0f}/s" if target_at else "")
        ax.axhline(target_ms, color=TARGET_COLOR, linestyle=(0, (6, 4)), linewidth=1, label=note)
        if target_at:
            ax.plot([target_at], [target_ms], "s", color=TARGET_COLOR, markersize=7)
    offered = sorted({r[1] for r in rows})
    if offered:
        ax.set_xticks(offered, [f"{x:,.0f}" for x in offered])
        ax.set_xlim(0, max(offered) * 1.08)
    _ms_axis(ax)
    ax.set_xlabel("offered load (events/s)")
    ax.set_title(title)
    _legend(fig, ax)
    return _save(fig, path)


def timeline_plot(
    path: Path,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    title: str,
    xlabel: str = "seconds since the first commit",
    reference: tuple[str, float] | None = None,
) -> list[Path]:
    """series: (label, [(seconds, latency ms), ...]): one dot per event, on a log-scale
    latency axis against time; reference: a labelled dashed line (a bar to meet).
    Returns the files written."""
    fig, ax = _figure()
    for n, (name, points) in enumerate(series):
        shown = [(t, v) for t, v in points if _finite(v)]
        xs = [t for t, _ in shown]
        ys = [v for _, v in shown]
        # Many thousand dots: small, no edge, rasterized inside the SVG to keep it light.
        ax.scatter(xs, ys, s=3, color=f"C{n}", linewidths=0, label=name, rasterized=True)
    if reference is not None:
        note, value = reference
        ax.axhline(value, color=TARGET_COLOR, linestyle=(0, (6, 4)), linewidth=1, label=note)
    ax.set_xlim(left=0)
    _ms_axis(ax)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    _legend(fig, ax, markerscale=4)
    return _save(fig, path)
