"""End-to-end latency at offered loads: bench/compare/steady_producer.py commits events at a steady
rate, a consumer takes receive time minus commit time by the seq in each payload, and the
broker's append time (the latency topics are LogAppendTime) minus commit time: commit to
Kafka, without the consumer's fetch."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.compare.common import LATENCY_WARM_ROWS, PYTHON, ROOT, say
from bench.compare.context import Context
from bench.shared.processes import Proc
from bench.shared.procstat import loadavg
from bench.shared.steady import percentile


@dataclass
class LatencyPoint:
    contender: str
    offered: float  # events/s asked for
    achieved: float  # events/s committed
    measured: int  # events whose latency is in the figures
    missing: int  # committed but not received in time
    p50_ms: float
    p99_ms: float
    max_ms: float
    p50_kafka_ms: float = float("nan")  # commit to the broker's append
    p99_kafka_ms: float = float("nan")


@dataclass
class Offered:
    """One run of bench/compare/steady_producer.py: commit time per seq."""

    first_seq: int
    commit_at: list[float]
    elapsed: float

    @property
    def total(self) -> int:
        return len(self.commit_at)


async def offer(
    url: str, rate: float, seconds: float, first_seq: int, args: argparse.Namespace, logdir: Path
) -> Offered:
    out = logdir / f"commits-{first_seq}.txt"
    res = await asyncio.to_thread(
        subprocess.run,
        [
            PYTHON,
            "-m",
            "bench.compare.steady_producer",
            "--database-url",
            url,
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--first-seq",
            str(first_seq),
            "--keys",
            str(args.keys),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=seconds * 20 + 60,
    )
    if res.returncode != 0:
        raise RuntimeError(f"bench.steady_producer failed:\n{res.stdout}{res.stderr}")
    lines = out.read_text().splitlines()
    elapsed = float(lines[0].split()[2])
    return Offered(first_seq, [float(line.split()[1]) for line in lines[1:]], elapsed)


class Receiver:
    """Receive time and append time of every event on the topic, by the seq in its JSON
    payload (transactional: read read_committed, so an event counts once its transaction
    has committed)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, transactional: bool = False
    ) -> None:
        self.received: dict[int, float] = {}
        self.appended: dict[int, float] = {}
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            isolation_level="read_committed" if transactional else "read_uncommitted",
        )
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.assign(self._tps)
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batches.values():
                for rec in records:
                    seq = int(json.loads(rec.value)["seq"])
                    self.received.setdefault(seq, now)
                    self.appended.setdefault(seq, rec.timestamp / 1000)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()


async def offered_loads(
    contender: str,
    url: str,
    topic: str,
    ctx: Context,
    proc: Proc,
    transactional: bool = False,
) -> list[LatencyPoint]:
    args = ctx.args
    receiver = Receiver(ctx.services.bootstrap, topic, args.partitions, transactional)
    await receiver.start()
    points: list[LatencyPoint] = []
    try:
        # Warm-up: the contender has drained a first backlog (loaded by the caller, seqs
        # below backlog.events) and delivers a light load before the first measured one.
        await wait_received(receiver, range(0, warm_rows(ctx)), 300.0, proc)
        seq = 1_000_000_000
        warm = await offer(url, 200, 3.0, seq, args, ctx.logdir)
        await wait_received(receiver, range(seq, seq + warm.total), 120.0, proc)
        seq += warm.total
        for rate in args.latency_rates:
            load = await offer(url, rate, args.latency_seconds, seq, args, ctx.logdir)
            wanted = range(seq, seq + load.total)
            await wait_received(receiver, wanted, 120.0, proc)
            skip = int(rate * args.latency_warmup_s)  # the first moments of each load
            lat, kafka = (
                sorted((at[s] - load.commit_at[s - seq]) * 1000 for s in wanted[skip:] if s in at)
                for at in (receiver.received, receiver.appended)
            )
            missing = sum(1 for s in wanted if s not in receiver.received)
            point = LatencyPoint(
                contender,
                float(rate),
                load.total / load.elapsed if load.elapsed else 0.0,
                len(lat),
                missing,
                percentile(lat, 0.50),
                percentile(lat, 0.99),
                lat[-1] if lat else float("nan"),
                percentile(kafka, 0.50),
                percentile(kafka, 0.99),
            )
            say(
                f"latency {contender} @ {rate:.0f}/s: committed {point.achieved:.0f}/s, p50 "
                f"{point.p50_ms:.1f} ms, p99 {point.p99_ms:.1f} ms, max {point.max_ms:.1f} ms, "
                f"to Kafka p50 {point.p50_kafka_ms:.1f} ms, p99 {point.p99_kafka_ms:.1f} ms, "
                f"not received {missing} (load {loadavg()})"
            )
            points.append(point)
            seq += load.total
    finally:
        await receiver.stop()
    return points


async def wait_received(receiver: Receiver, wanted: range, timeout: float, proc: Proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        if all(s in receiver.received for s in (wanted[0], wanted[-1])) and all(
            s in receiver.received for s in wanted
        ):
            return
        await asyncio.sleep(0.1)


def warm_rows(ctx: Context) -> int:
    return min(ctx.backlog.events, LATENCY_WARM_ROWS)
