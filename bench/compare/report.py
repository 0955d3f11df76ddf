"""The report: drain and latency tables, ratios, the targets met or missed, the machine, and
the generated section of docs/benchmarks.md between DOC_START and DOC_END."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
from pathlib import Path

from bench.compare.backlog import Backlog
from bench.compare.common import (
    CONTENDERS,
    DEBEZIUM_VERSION,
    DOC_END,
    DOC_START,
    KAFKA_VERSION,
    LABELS,
    ROOT,
    TARGETS,
)
from bench.compare.drain import Drain
from bench.compare.latency import LatencyPoint
from bench.compare.services import Services, server_settings


def median_drain(runs: list[Drain]) -> Drain:
    """The round with the median rate (rounds > 1), so that every column is one real run."""
    ordered = sorted(runs, key=lambda d: d.rate)
    return ordered[(len(ordered) - 1) // 2]


def fmt_ratio(a: Drain | None, b: Drain | None) -> str:
    if a is None or b is None or b.rate <= 0:
        return "n/a"
    return f"{a.rate / b.rate:.2f}"


def drain_table(drains: dict[str, list[Drain]]) -> list[str]:
    lines = [
        "| contender | events/s | start-up s | drain s | events | CPU s / 100k events | peak RSS MiB | Postgres CPU s | Kafka CPU s | rounds (events/s) | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in CONTENDERS:
        if name not in drains:
            continue
        d = median_drain(drains[name])
        rounds = ", ".join(f"{r.rate:,.0f}" for r in drains[name])
        lines.append(
            f"| {LABELS[name]} | {d.rate:,.0f} | {d.startup_s:.1f} | {d.active_s:.1f} | "
            f"{d.counted:,} | {d.cpu_per_100k:.1f} | {d.peak_rss_bytes / 2**20:.0f} | "
            f"{'' if d.pg_cpu_s is None else f'{d.pg_cpu_s:.1f}'} | "
            f"{'' if d.kafka_cpu_s is None else f'{d.kafka_cpu_s:.1f}'} | {rounds} | {d.note} |"
        )
    return lines


def ratio_lines(drains: dict[str, list[Drain]]) -> tuple[list[str], dict[str, float]]:
    med = {k: median_drain(v) for k, v in drains.items()}
    ours = med.get("ours")
    values: dict[str, float] = {}
    lines = ["| ratio | ours (defaults) | ours, 2 replicas | target |", "|---|---:|---:|---|"]
    for other, target in (
        ("debezium", f">= {TARGETS['vs_debezium']:.1f}"),
        ("naive", "> 1 (CI check)"),
        ("ceiling", f">= {TARGETS['vs_ceiling']:.1f}"),
    ):
        if other not in med:
            continue
        lines.append(
            f"| ours/{other} | {fmt_ratio(ours, med[other])} | "
            f"{fmt_ratio(med.get('ours2'), med[other])} | {target} |"
        )
        if ours is not None and med[other].rate > 0:
            values[other] = ours.rate / med[other].rate
    return lines, values


def latency_table(points: list[LatencyPoint]) -> list[str]:
    lines = [
        "| contender | offered events/s | committed events/s | events measured | p50 ms | p99 ms | max ms | not received |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {LABELS[p.contender]} | {p.offered:,.0f} | {p.achieved:,.0f} | {p.measured:,} | "
            f"{p.p50_ms:.1f} | {p.p99_ms:.1f} | {p.max_ms:.1f} | {p.missing} |"
        )
    return lines


def shortfalls(
    drains: dict[str, list[Drain]], points: list[LatencyPoint], ratios: dict[str, float]
) -> list[str]:
    out: list[str] = []
    if "ours" in drains:
        rate = median_drain(drains["ours"]).rate
        verdict = "met" if rate >= TARGETS["drain"] else "MISSED"
        out.append(f"- drain >= {TARGETS['drain']:,.0f} events/s: {rate:,.0f} ({verdict})")
    if "debezium" in ratios:
        r = ratios["debezium"]
        out.append(
            f"- >= {TARGETS['vs_debezium']:.0f}x Debezium: {r:.2f}x ({'met' if r >= TARGETS['vs_debezium'] else 'MISSED'})"
        )
    if "ceiling" in ratios:
        r = ratios["ceiling"]
        out.append(
            f"- >= {TARGETS['vs_ceiling']:.1f} of the database ceiling: {r:.2f} "
            f"({'met' if r >= TARGETS['vs_ceiling'] else 'MISSED'})"
        )
    for p in points:
        if p.contender == "ours" and p.offered == 2000:
            ok = p.p99_ms <= TARGETS["p99_ms_at_2000"] and p.missing == 0
            out.append(
                f"- p99 <= {TARGETS['p99_ms_at_2000']:.0f} ms at 2,000 events/s: {p.p99_ms:.1f} ms "
                f"({'met' if ok else 'MISSED'})"
            )
    return out


def machine_lines(services: Services) -> list[str]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    settings = server_settings(services.url)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return [
        f"- CPU: {os.cpu_count()} cores, {cpu}; memory {mem_kb / 2**20:.0f} GiB; kernel {platform.release()}",
        f"- Postgres: `{settings[0]}`; wal_level={settings[1]}, shared_buffers={settings[2]}, "
        f"synchronous_commit={settings[3]}, fsync={settings[4]}"
        + (" (the bench's own cluster, scripts/services.py)" if services.own else ""),
        f"- Kafka {KAFKA_VERSION}, one KRaft node (scripts/services.py), -Xmx512m"
        + (f", at {services.bootstrap} (the bench's own broker)" if services.own else ""),
        f"- Kafka Connect {KAFKA_VERSION} standalone, Debezium {DEBEZIUM_VERSION} (pgoutput); {java[0] if java else 'java'}",
        f"- Python {platform.python_version()}; code `{commit}`",
        "- Client, relays, Postgres and Kafka share the two cores and talk over 127.0.0.1.",
    ]


def render(
    args: argparse.Namespace,
    services: Services,
    backlog: Backlog,
    drains: dict[str, list[Drain]],
    points: list[LatencyPoint],
    plot: str | None,
    load_before: str,
    load_after: str,
    started: str,
) -> str:
    ratios_md, ratios = ratio_lines(drains)
    out = [
        DOC_START,
        "",
        f"Run of {started}: {backlog.events:,} events, average payload {backlog.payload_bytes:.0f} B "
        f"JSON, {backlog.keys:,} keys, {args.partitions} partitions per topic, "
        f"{args.rounds} round(s) per contender; the table shows the median round "
        "(with an even count the slower of the two middle ones), the rounds column all of them.",
        "",
        "### Command",
        "",
        "```bash",
        " ".join([".venv/bin/python bench/relay_compare.py", *args.argv]),
        "```",
        "",
        "### Machine",
        "",
        *machine_lines(services),
        f"- Load average (1, 5, 15 min) before the run: {load_before}; after: {load_after}. "
        "Other engineers' test suites were running on the same two cores: absolute numbers "
        "are noisy, the contenders ran one after another within minutes.",
        "",
        "### Drain",
        "",
        *drain_table(drains),
        "",
        *ratios_md,
        "",
        "events/s = events delivered / (last event on the topic, and for the database relays "
        "the outbox empty, - first event on the topic). start-up = launch to first event. "
        "CPU s / 100k events: the contender's own processes (user + system, from /proc) in the "
        "drain window; Postgres and Kafka CPU s: the servers' processes in the same window. "
        "Peak RSS: VmHWM, summed over the contender's processes.",
        "",
    ]
    if points:
        out += ["### End-to-end latency", "", *latency_table(points), ""]
        if plot:
            out += [f"![latency against offered load]({plot})", ""]
        out += [
            "Latency = consumer receive time - the producer's COMMIT return time, same clock; "
            f"{args.latency_seconds:.0f} s per load, the first {args.latency_warmup_s:.0f} s "
            "of each load left out; producer_lib `emit_batch` commits what is due every 5 ms.",
            "",
        ]
    out += ["### Targets", "", *shortfalls(drains, points, ratios), "", DOC_END]
    return "\n".join(out)


def write_docs(text: str) -> Path:
    doc = ROOT / "docs" / "benchmarks.md"
    current = doc.read_text("utf-8")
    if DOC_START in current and DOC_END in current:
        head, rest = current.split(DOC_START, 1)
        tail = rest.split(DOC_END, 1)[1]
        doc.write_text(head + text + tail, "utf-8")
    else:
        doc.write_text(
            current.rstrip("\n")
            + "\n\n## relay: drain and latency against Debezium and a naive relay\n\n"
            + text
            + "\n",
            "utf-8",
        )
    return doc
