"""Where a relay batch spends its time: claim, publish (hand to Kafka and wait for the acks),
settle.

Runs the relay in this process (RelayService, default settings) over the same kind of
backlog as bench/relay_compare.py, with its store and publisher wrapped in timers; each
cycle runs as one task, so a context variable follows one batch through claim,
publish and settle. Prints, per phase, the median and mean milliseconds per batch and the
share of a batch's wall time.

    .venv/bin/python bench/relay_phases.py [--events 100000] [--services bench|env]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare.backlog import build_template, copy_database, drop_database, load_backlog
from bench.compare.common import BENCH_CACHE, BENCH_KAFKA_PORT, BENCH_PG_PORT, loadavg, say
from bench.compare.services import start_services
from bench.compare.topics import TopicCounter, create_topic, delete_topics
from bench.emit_overhead import TOPIC
from relay.config import load_settings
from relay.database import make_store
from relay.service import RelayService
from relay.store import ClaimedRow, ClaimRequest, Settled, SettleRequest, Store
from relay.transport import KafkaPublisher, Outcome, OutgoingRecord

_BATCH: contextvars.ContextVar[dict[str, float]] = contextvars.ContextVar("batch")
PHASES = ("claim", "publish", "between", "settle")


class TimedStore:
    def __init__(self, inner: Store, batches: list[dict[str, float]]) -> None:
        self._inner = inner
        self._batches = batches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        t0 = time.perf_counter()
        rows = await self._inner.claim(request)
        _BATCH.set({"t0": t0, "t1": time.perf_counter(), "rows": float(len(rows))})
        return rows

    async def settle(self, request: SettleRequest) -> Settled:
        batch = _BATCH.get()
        batch["t4"] = time.perf_counter()
        settled = await self._inner.settle(request)
        batch["t5"] = time.perf_counter()
        self._batches.append(batch)
        return settled


class TimedPublisher:
    def __init__(self, inner: KafkaPublisher) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        batch = _BATCH.get()
        batch["t2"] = time.perf_counter()
        outcomes = await self._inner.publish(records)
        batch["t3"] = time.perf_counter()
        return outcomes


def summarize(batches: list[dict[str, float]]) -> list[str]:
    spans: dict[str, list[float]] = {p: [] for p in PHASES}
    walls: list[float] = []
    for b in batches:
        if not {"t0", "t1", "t2", "t3", "t4", "t5"} <= b.keys():
            continue
        spans["claim"].append(b["t1"] - b["t0"])
        spans["publish"].append(b["t3"] - b["t2"])
        spans["between"].append((b["t2"] - b["t1"]) + (b["t4"] - b["t3"]))
        spans["settle"].append(b["t5"] - b["t4"])
        walls.append(b["t5"] - b["t0"])
    total = sum(walls)
    lines = [
        "| phase | median ms / batch | mean ms / batch | share of batch time |",
        "|---|---:|---:|---:|",
    ]
    for phase in PHASES:
        values = spans[phase]
        lines.append(
            f"| {phase} | {statistics.median(values) * 1000:.1f} | "
            f"{statistics.fmean(values) * 1000:.1f} | {sum(values) / total:.0%} |"
        )
    lines.append(
        f"| whole batch | {statistics.median(walls) * 1000:.1f} | "
        f"{statistics.fmean(walls) * 1000:.1f} | 100% |"
    )
    return lines


async def run(args: argparse.Namespace) -> int:
    services = start_services(args)
    run_id = uuid.uuid4().hex[:8]
    backlog = build_template(services, run_id, args.events, 1000, 1)
    name = f"bench_{run_id}_phases"
    url = copy_database(services, backlog, name)
    prefix = f"bench.{run_id}.phases."
    topic = prefix + TOPIC
    batches: list[dict[str, float]] = []
    try:
        await create_topic(services.bootstrap, topic, args.partitions)
        load_backlog(url, backlog.events)
        overrides: dict[str, Any] = {"http_enabled": False} if args.no_http else {}
        overrides["kafka_security_protocol"] = "PLAINTEXT"
        settings = load_settings(
            database_url=url,
            kafka_bootstrap_servers=services.bootstrap,
            topic_prefix=prefix,
            **overrides,
        )
        service = RelayService(
            settings,
            store=TimedStore(make_store(settings.database), batches),
            publisher=TimedPublisher(
                KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
            ),
        )
        before = loadavg()
        started = time.perf_counter()
        task = asyncio.create_task(service.run())
        async with TopicCounter(services.bootstrap, topic, args.partitions) as counter:
            for _ in range(36_000):  # 30 minutes at most
                if await counter.count() >= backlog.events:
                    break
                await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        service.stop()
        await task
    finally:
        drop_database(services, name)
        drop_database(services, backlog.template)
        await delete_topics(services.bootstrap, [topic])
    full = [b for b in batches if b.get("rows", 0) > 0]
    say(
        f"{backlog.events:,} events in {elapsed:.1f}s from start ({backlog.events / elapsed:,.0f}/s), "
        f"{len(full)} batches, median {statistics.median(b['rows'] for b in full):.0f} rows; "
        f"load {before} -> {loadavg()}"
    )
    print("\n".join(summarize(full)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--services", choices=["bench", "env"], default="bench")
    p.add_argument("--cache-dir", default=str(BENCH_CACHE))
    p.add_argument("--pg-port", type=int, default=BENCH_PG_PORT)
    p.add_argument("--kafka-port", type=int, default=BENCH_KAFKA_PORT)
    p.add_argument("--no-http", action="store_true", help="turn the relay's ops endpoint off")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
