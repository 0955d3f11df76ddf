"""The tables bench/record_formats.py prints: the Debezium comparison and the drains per
format against native's, in Markdown as docs/benchmarks.md quotes them."""

from __future__ import annotations

import statistics

from bench.compare.drain import Drain
from bench.formats.debezium_match import CONTEXT_PREFIX, Match
from bench.formats.settings import BAR, BASELINE
from bench.shared.tables import PAIRED, markdown_table, ratios


def names(headers: set[str]) -> str:
    return ", ".join(sorted(headers))


def match_table(match: Match) -> list[str]:
    rows = [
        ["records", "count"],
        ["events emitted", f"{match.events:,}"],
        ["compared (matched by id)", f"{match.compared:,}"],
        ["equal", f"{match.equal:,}"],
        ["differing", f"{match.differing:,}"],
        ["only on Debezium's topics", f"{match.only_debezium:,}"],
        ["only on the relay's topics", f"{match.only_relay:,}"],
        ["same partition (not judged)", f"{match.same_partition:,}"],
    ]
    lines = markdown_table(rows, 1)
    context = {h for h in match.debezium_headers if h.startswith(CONTEXT_PREFIX)}
    compared = match.debezium_headers - context
    lines += [
        "",
        f"Headers Debezium set, compared: {names(compared) or '-'}; its context headers, "
        f"not compared: {names(context) or '-'}; the relay's beside them: "
        f"{names(match.relay_extra_headers) or '-'}.",
        f"Debezium: streaming {match.debezium_startup_s:.1f} s after launch, its records on "
        f"the topics {match.debezium_s:.1f} s after the emit; the relay's "
        f"{match.relay_s:.1f} s after launch.",
    ]
    if match.differences:
        lines += ["", "First differences:", *(f"- {d}" for d in match.differences)]
    return lines


def against_native(drains: dict[str, list[Drain]]) -> dict[str, tuple[float, float] | None]:
    """Each format's ratios to native's rounds (bench/shared/tables.ratios); None where a
    native drain measured no rate (a backlog small enough to land within one sample)."""
    base = [d.rate for d in drains[BASELINE]]
    if not all(base):
        return dict.fromkeys(drains)
    return {name: ratios([d.rate for d in runs], base) for name, runs in drains.items()}


def drain_table(drains: dict[str, list[Drain]]) -> list[str]:
    """Median events/s per format, its ratio to native's (median over median, and paired
    round by round), every round's rate, the relay's CPU an event and the audit."""
    against = against_native(drains)
    rows = [
        [
            "format",
            "events/s (median)",
            f"/ {BASELINE}",
            "paired",
            "rounds (events/s)",
            "relay CPU µs / event",
            "lost",
            "duplicates",
            "order violations",
        ]
    ]
    for name, runs in drains.items():
        ratio = against[name]
        audits = [d.audit for d in runs if d.audit is not None]
        rows.append(
            [
                name,
                f"{statistics.median(d.rate for d in runs):,.0f}",
                "n/a" if ratio is None else f"{ratio[0]:.2f}",
                "n/a" if ratio is None else f"{ratio[1]:.2f}",
                ", ".join(f"{d.rate:,.0f}" for d in runs),
                f"{statistics.median(d.cpu_us_per_event for d in runs):.1f}",
                f"{sum(a.lost for a in audits):,}",
                f"{sum(a.duplicates for a in audits):,}",
                f"{sum(a.order_violations for a in audits):,}",
            ]
        )
    return [*markdown_table(rows, 1), "", f"{PAIRED}; {bar_line(against)}"]


def bar_line(against: dict[str, tuple[float, float] | None]) -> str:
    """The issue's bar, on the median over median ratio."""
    measured = [
        (ratio[0], name)
        for name, ratio in against.items()
        if ratio is not None and name != BASELINE
    ]
    if not measured:
        return "bar: not judged (no other format, or no native rate measured: a larger --events measures one)"
    worst, name = min(measured)
    verdict = "met" if worst >= BAR else "missed"
    return (
        f"bar (each format >= {BAR} of {BASELINE}'s drain): {verdict}, lowest {name} at {worst:.2f}"
    )
