"""A drain: the contender's processes started on a loaded outbox, the topic's end offsets sampled
every SAMPLE_S until the whole backlog is on it, what that window measured, and the audit of
the whole topic once the processes stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.compare.audit import Audit, audit_topic
from bench.compare.common import SAMPLE_S, outbox_connection, outbox_rows
from bench.compare.context import Context
from bench.compare.services import Services
from bench.shared import procstat
from bench.shared.processes import Proc
from bench.shared.procstat import loadavg
from bench.shared.topics import TopicCounter


@dataclass
class Drain:
    contender: str
    events: int
    delivered: int
    complete: bool
    startup_s: float  # launch -> first event on the topic
    active_s: float  # first event -> last event on the topic (and outbox empty)
    counted: int  # records that reached the topic in the active window (the rate's)
    cpu_s: float  # contender processes' CPU in the active window
    cpu_total_s: float  # since launch
    peak_rss_bytes: int  # summed over the contender's processes
    pg_cpu_s: float | None = None
    kafka_cpu_s: float | None = None
    load_s: float = 0.0
    loadavg: str = ""
    note: str = ""
    audit: Audit | None = None

    @property
    def rate(self) -> float:
        return self.counted / self.active_s if self.active_s > 0 else 0.0

    @property
    def events_out(self) -> int:
        """Events delivered: audited exactly where the topic was read, else as measured."""
        return self.audit.distinct if self.audit is not None else self.delivered

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s / self.counted * 1e6 if self.counted else 0.0


def median_drain(runs: list[Drain]) -> Drain:
    """The round with the median rate (rounds > 1), so that every column is one real run."""
    ordered = sorted(runs, key=lambda d: d.rate)
    return ordered[(len(ordered) - 1) // 2]


def medians(drains: dict[str, list[Drain]]) -> dict[str, Drain]:
    return {k: median_drain(v) for k, v in drains.items()}


async def drain_processes(
    ctx: Context,
    contender: str,
    url: str,
    topic: str,
    load_s: float,
    start: Callable[[], list[Proc]],
    cap_s: float | None,
    check_outbox: bool,
    transactional: bool = False,
) -> Drain:
    """Start the contender's processes on the loaded outbox, watch the drain, stop them.
    transactional: the topic is written in Kafka transactions (audited read_committed)."""
    before = loadavg()
    launched = time.time()
    procs = start()
    try:
        result = await watch_drain(
            contender,
            procs,
            ctx.services,
            url,
            topic,
            ctx.args.partitions,
            ctx.backlog.events,
            launched,
            cap_s,
            check_outbox=check_outbox,
        )
    finally:
        for p in procs:
            p.stop()
    result.load_s, result.loadavg = load_s, before
    # Debezium leaves every row in the table: only the relays' outboxes say what is
    # still unpublished.
    result.audit = await audit_topic(
        ctx.services.bootstrap,
        topic,
        ctx.args.partitions,
        ctx.backlog.events,
        url if check_outbox else None,
        transactional,
    )
    return result


async def watch_drain(
    contender: str,
    procs: list[Proc],
    services: Services,
    url: str,
    topic: str,
    partitions: int,
    events: int,
    launched: float,
    cap_s: float | None,
    check_outbox: bool,
) -> Drain:
    """Sample the topic's end offsets every SAMPLE_S until all events are there."""

    def pids() -> list[int]:
        return [p.pid for p in procs]

    def system() -> tuple[dict[int, float], dict[int, float]]:
        return services.postgres_cpu(), procstat.total_cpu(services.kafka_pids())

    first_t: float | None = None
    first_count = 0
    cpu_first: dict[int, float] = {}
    pg_first: dict[int, float] = {}
    kafka_first: dict[int, float] = {}
    complete = False
    count = 0
    async with TopicCounter(services.bootstrap, topic, partitions) as counter:
        while True:
            await asyncio.sleep(SAMPLE_S)
            now = time.time()
            count = await counter.count()
            for p in procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited early:\n{p.tail()}")
            if first_t is None and count > 0:
                first_t, first_count = now, count
                cpu_first = procstat.total_cpu(pids())
                pg_first, kafka_first = system()
            if count >= events:
                if check_outbox:
                    now = await outbox_emptied(url)
                complete = True
                break
            if cap_s is not None and first_t is not None and now - first_t > cap_s:
                break
            if first_t is None and now - launched > 300:
                raise RuntimeError(f"{contender}: nothing reached the topic in 300 s")
    done = now
    cpu_done = procstat.total_cpu(pids())
    pg_done, kafka_done = system()
    samples = [s for s in (procstat.sample(pid) for pid in pids()) if s is not None]
    assert first_t is not None
    return Drain(
        contender=contender,
        events=events,
        delivered=count,
        complete=complete,
        startup_s=first_t - launched,
        active_s=done - first_t,
        counted=count - first_count,
        cpu_s=procstat.cpu_between(cpu_first, cpu_done),
        cpu_total_s=sum(cpu_done.values()),
        peak_rss_bytes=sum(s.peak_rss_bytes for s in samples),
        pg_cpu_s=procstat.cpu_between(pg_first, pg_done) if pg_done else None,
        kafka_cpu_s=procstat.cpu_between(kafka_first, kafka_done) if kafka_done else None,
    )


async def outbox_emptied(url: str) -> float:
    """When the last row is settled: the relay acks a row before it marks or deletes it."""
    conn, statements = outbox_connection(url)
    try:
        for _ in range(60_000):
            # One short query on a local server: the loop waits for nothing else meanwhile.
            if not outbox_rows(conn, statements["outbox_any_left"])[0][0]:
                break
            await asyncio.sleep(0.01)
    finally:
        conn.close()
    return time.time()
