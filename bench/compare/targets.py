"""The bars of issue 13's drain, held against one run: the pipeline ceiling of each retention
mode (1 / (1/db + 1/kafka)), each relay's share of it, and the targets met or missed."""

from __future__ import annotations

from bench.compare.common import DB_CEILING, LABELS, MARIADB_TWINS, RELAY_MODES, TARGETS
from bench.compare.drain import Drain, medians
from bench.compare.latency import LatencyPoint


def pipeline_ceilings(med: dict[str, Drain]) -> dict[str, float]:
    """Per retention mode, 1 / (1/db + 1/kafka) from this run's median rounds: the rate of a
    relay that claimed and settled as fast as the database allows and produced as fast as
    its client allows, one after the other."""
    kafka = med.get("kafka")
    found: dict[str, float] = {}
    for mode, db_name in DB_CEILING.items():
        db = med.get(db_name)
        if kafka is not None and db is not None and kafka.rate > 0 and db.rate > 0:
            found[mode] = 1 / (1 / db.rate + 1 / kafka.rate)
    return found


def vs_pipeline(med: dict[str, Drain]) -> dict[str, float]:
    """Each of our relays' rate over the pipeline ceiling of its retention mode."""
    ceilings = pipeline_ceilings(med)
    return {
        name: med[name].rate / ceilings[mode]
        for name, mode in RELAY_MODES.items()
        if name in med and mode in ceilings
    }


def pipeline_table(med: dict[str, Drain]) -> list[str]:
    ceilings, ratios = pipeline_ceilings(med), vs_pipeline(med)
    kafka = med.get("kafka")
    lines = [
        "| relay | retention | events/s | database ceiling | Kafka ceiling | "
        "pipeline ceiling | of the pipeline ceiling | target |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, mode in RELAY_MODES.items():
        if name not in med:
            continue
        db = med.get(DB_CEILING[mode])
        lines.append(
            f"| {LABELS[name]} | {mode} | {med[name].rate:,.0f} | "
            f"{'n/a' if db is None else f'{db.rate:,.0f}'} | "
            f"{'n/a' if kafka is None else f'{kafka.rate:,.0f}'} | "
            f"{f'{ceilings[mode]:,.0f}' if mode in ceilings else 'n/a'} | "
            f"{f'{ratios[name]:.2f}' if name in ratios else 'n/a'} | "
            f">= {TARGETS['vs_pipeline']:.1f} |"
        )
    return lines


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def mariadb_ratios(drains: dict[str, list[Drain]], points: list[LatencyPoint]) -> list[str]:
    """Each MariaDB contender against its Postgres twin in this run: the drain's events/s
    and, at each offered load both ran, the commit-to-Kafka p99, with the bars. Each line
    starts with the twin's name (ours, floor): the floor pair's lines say whether the
    cheapest loop doing the work meets the bars on this machine at all."""
    med = medians(drains)
    out: list[str] = []
    for maria, twin in MARIADB_TWINS.items():
        if maria in med and twin in med:
            m, p = med[maria].rate, med[twin].rate
            bar = TARGETS["mariadb_drain"]
            # A backlog drained within one sample has no rate: too small to compare.
            judged = f"{m / p:.2f}" if m > 0 and p > 0 else "n/a"
            met = verdict(m / p >= bar) if judged != "n/a" else "not measured"
            out.append(
                f"{twin}: MariaDB/Postgres drain: {judged} ({LABELS[maria]} {m:,.0f} events/s, "
                f"{LABELS[twin]} {p:,.0f} events/s; at least {bar:.1f}: {met})"
            )
        theirs = {pt.offered: pt for pt in points if pt.contender == twin}
        for pt in points:
            other = theirs.get(pt.offered)
            if pt.contender != maria or other is None or not other.p99_kafka_ms > 0:
                continue
            ratio, bar = pt.p99_kafka_ms / other.p99_kafka_ms, TARGETS["mariadb_p99"]
            out.append(
                f"{twin}: MariaDB/Postgres commit-to-Kafka p99 at {pt.offered:,.0f} events/s: "
                f"{ratio:.2f} ({LABELS[maria]} {pt.p99_kafka_ms:.1f} ms, {LABELS[twin]} "
                f"{other.p99_kafka_ms:.1f} ms; at most {bar:.1f}: {verdict(ratio <= bar)})"
            )
    return out


def shortfalls(drains: dict[str, list[Drain]], points: list[LatencyPoint]) -> list[str]:
    med = medians(drains)
    ratios = vs_pipeline(med)
    out: list[str] = [f"- {line}" for line in mariadb_ratios(drains, points)]
    for name, mode in RELAY_MODES.items():
        if name == "ours2" or name not in med:
            continue
        if name in ratios:
            r = ratios[name]
            out.append(
                f"- {LABELS[name]} >= {TARGETS['vs_pipeline']:.1f} of the pipeline ceiling "
                f"({mode}): {r:.2f} ({verdict(r >= TARGETS['vs_pipeline'])})"
            )
        else:
            out.append(
                f"- {LABELS[name]} against the pipeline ceiling ({mode}): not measured "
                f"(needs {DB_CEILING[mode]} and kafka in the run)"
            )
        cpu = med[name].cpu_us_per_event
        out.append(
            f"- {LABELS[name]} CPU <= {TARGETS['cpu_us_per_event']:.0f} µs/event: {cpu:.1f} "
            f"({verdict(cpu <= TARGETS['cpu_us_per_event'])})"
        )
        a = med[name].audit
        if a is not None:
            ok = a.lost == 0 and a.order_violations == 0
            out.append(
                f"- {LABELS[name]}, the whole topic audited: {a.lost:,} lost, "
                f"{a.order_violations:,} per-key order violations, {a.duplicates:,} duplicates "
                f"({verdict(ok)})"
            )
    if "ours-delete" in med:
        rate = med["ours-delete"].rate
        out.append(
            f"- {LABELS['ours-delete']} >= {TARGETS['drain_delete']:,.0f} events/s: {rate:,.0f} "
            f"({verdict(rate >= TARGETS['drain_delete'])})"
        )
    for p in points:
        if p.contender == "ours":
            ok = (
                p.p50_ms <= TARGETS["latency_p50_ms"]
                and p.p99_ms <= TARGETS["latency_p99_ms"]
                and p.missing == 0
            )
            # Here latency ends at the harness's consumer; bench/relay_latency.py measures
            # the bar itself, to the broker's append time.
            out.append(
                f"- p50 <= {TARGETS['latency_p50_ms']:.0f} ms and p99 <= "
                f"{TARGETS['latency_p99_ms']:.0f} ms at {p.offered:,.0f} events/s (to the "
                f"consumer): {p.p50_ms:.1f} / {p.p99_ms:.1f} ms ({verdict(ok)})"
            )
    return out
