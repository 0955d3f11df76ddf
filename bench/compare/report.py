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
    RELAY_MODES,
    ROOT,
)
from bench.compare.drain import Drain, median_drain, medians
from bench.compare.latency import LatencyPoint
from bench.compare.services import Services, server_settings
from bench.compare.targets import pipeline_table, shortfalls
from outbox_core.distribution import version


def fmt_ratio(a: Drain | None, b: Drain | None) -> str:
    if a is None or b is None or b.rate <= 0:
        return "n/a"
    return f"{a.rate / b.rate:.2f}"


def drain_table(drains: dict[str, list[Drain]]) -> list[str]:
    lines = [
        "| contender | events/s | start-up s | drain s | delivered | lost | duplicates | "
        "order violations | CPU µs / event | peak RSS MiB | Postgres CPU s | Kafka CPU s | "
        "rounds (events/s) | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in CONTENDERS:
        if name not in drains:
            continue
        d = median_drain(drains[name])
        a = d.audit
        audited = (
            ["", "", ""]
            if a is None
            else [
                f"{a.lost:,}",
                f"{a.duplicates:,}",
                f"{a.order_violations:,}",
            ]
        )
        rounds = ", ".join(f"{r.rate:,.0f}" for r in drains[name])
        note = d.note
        if a is not None and a.unreadable:
            note = f"{a.unreadable:,} records without a readable seq; {note}".rstrip("; ")
        lines.append(
            f"| {LABELS[name]} | {d.rate:,.0f} | {d.startup_s:.1f} | {d.active_s:.1f} | "
            f"{d.events_out:,} | {' | '.join(audited)} | {d.cpu_us_per_event:.1f} | "
            f"{d.peak_rss_bytes / 2**20:.0f} | "
            f"{'' if d.pg_cpu_s is None else f'{d.pg_cpu_s:.1f}'} | "
            f"{'' if d.kafka_cpu_s is None else f'{d.kafka_cpu_s:.1f}'} | {rounds} | {note} |"
        )
    return lines


def ratio_lines(drains: dict[str, list[Drain]]) -> list[str]:
    med = medians(drains)
    ours = [name for name in RELAY_MODES if name in med]
    lines = [
        "| ratio | " + " | ".join(LABELS[name] for name in ours) + " |",
        "|---|" + "---:|" * len(ours),
    ]
    for other in ("debezium", "naive"):
        if other in med:
            cells = " | ".join(fmt_ratio(med[name], med[other]) for name in ours)
            lines.append(f"| ours/{other} | {cells} |")
    return lines if len(lines) > 2 and ours else []


def latency_table(points: list[LatencyPoint]) -> list[str]:
    lines = [
        "| contender | offered events/s | committed events/s | events measured | p50 ms | p99 ms | max ms | p50 ms to Kafka | p99 ms to Kafka | not received |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {LABELS[p.contender]} | {p.offered:,.0f} | {p.achieved:,.0f} | {p.measured:,} | "
            f"{p.p50_ms:.1f} | {p.p99_ms:.1f} | {p.max_ms:.1f} | {p.p50_kafka_ms:.1f} | "
            f"{p.p99_kafka_ms:.1f} | {p.missing} |"
        )
    return lines


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
    return [
        f"- CPU: {os.cpu_count()} cores, {cpu}; memory {mem_kb / 2**20:.0f} GiB; kernel {platform.release()}",
        f"- Postgres: `{settings[0]}`; wal_level={settings[1]}, shared_buffers={settings[2]}, "
        f"synchronous_commit={settings[3]}, fsync={settings[4]}"
        + (" (the bench's own cluster, scripts/services.py)" if services.own else ""),
        f"- Kafka {KAFKA_VERSION}, one KRaft node (scripts/services.py), -Xmx512m"
        + (f", at {services.bootstrap} (the bench's own broker)" if services.own else ""),
        f"- Kafka Connect {KAFKA_VERSION} standalone, Debezium {DEBEZIUM_VERSION} (pgoutput); {java[0] if java else 'java'}",
        f"- Python {platform.python_version()}; outbox-relay {version()}",
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
        " ".join([".venv/bin/python -m bench relay_compare", *args.argv]),
        "```",
        "",
        "### Machine",
        "",
        *machine_lines(services),
        f"- Load average (1, 5, 15 min) before the run: {load_before}; after: {load_after}. "
        "Absolute numbers move with whatever else runs on the machine; the contenders ran "
        "one after another within minutes, so compare them by their ratios.",
        "",
        "### Drain",
        "",
        *drain_table(drains),
        "",
        *pipeline_table(medians(drains)),
        "",
        *ratio_lines(drains),
        "",
        "events/s = records that reached the topic from the first sample that found one to "
        "the last event on the topic (and, for the database relays, the outbox settled), over "
        "that window; for the ceilings, the program's own first claim or hand-over to its "
        "last settle or ack. start-up = launch to first event. delivered, lost, duplicates, "
        "order violations: the audit of the whole topic after the drain (every record from "
        "offset 0 to the end offsets, read by its seq): delivered = distinct events, lost = "
        "events of the backlog neither on the topic nor still unpublished in the outbox, "
        "duplicates = records - distinct events, an order violation = a key's first-seen "
        "event with a lower seq than one already seen of that key. For the database "
        "ceilings, delivered = rows settled. pipeline ceiling = 1 / (1/database ceiling + "
        "1/Kafka ceiling) of the same retention mode, this run's median rounds. CPU µs / "
        "event: the contender's own processes (user + system, from /proc) in the drain "
        "window; Postgres and Kafka CPU s: the servers' processes in the same window (only "
        "with the bench's own services). Peak RSS: VmHWM, summed over the contender's "
        "processes.",
        "",
    ]
    if points:
        out += ["### End-to-end latency", "", *latency_table(points), ""]
        if plot:
            out += [f"![latency against offered load]({plot})", ""]
        out += [
            "Latency = consumer receive time - the producer's COMMIT return time, same clock "
            "(to Kafka: the broker's append time, LogAppendTime topics, - the same commit time); "
            f"{args.latency_seconds:.0f} s per load, the first {args.latency_warmup_s:.0f} s "
            "of each load left out; producer_lib `emit_batch` commits what is due every 5 ms.",
            "",
        ]
    out += ["### Targets", "", *shortfalls(drains, points), "", DOC_END]
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
