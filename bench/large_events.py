"""A backlog of large events: the relay's drain rate against the broker's for the same
records, and the relay's peak memory.

    .venv/bin/python -m bench large_events                      # 300 events, 900 KB and 1,000,000 B
    .venv/bin/python -m bench large_events --events 60 --sizes 900000 --rounds 1   # a quick look

For each payload size, in one run: a private database gets EVENTS events of that size over
KEYS keys (producer_lib, committed in one transaction once the relay is up), and two topics
of PARTITIONS partitions whose max.message.bytes takes them.

- broker: an aiokafka producer (acks=all, idempotent, the relay's max_request_size) sends
  the same records (key, payload, the relay's headers) straight to Kafka, every send
  started at once; its rate is records over the time from the first send to the last ack.
- relay: `outbox-relay run` (every setting at its default, but the topic prefix, plaintext,
  OUTBOX_RETENTION, once for each of --retentions, and OUTBOX_CLAIM_MAX_BYTES when
  --claim-max-bytes is given) drains the backlog; its rate
  is events over the time from the commit to the moment no row is left unpublished
  (polled every 20 ms). Its peak RSS is VmHWM from /proc/<pid>/status (the kernel's
  high-water mark, so no peak falls between samples), its base the RSS before the commit.

- floor (--floor): bench/steady_floor.py's loop, one delete-returning statement and one
  produce request a cycle, as many rows a cycle as the relay's byte budget holds; its
  drain ends once every record is on the topic.
- postgres (--postgres-alone): one connection of this process reads the payloads and
  deletes the rows, as many at a time, with no relay and no Kafka: the Postgres side of
  the relay's drain on its own.

Each window starts on warm free memory (bench/shared/warm_memory.py; --no-warm: as the machine
left it). Rounds alternate broker and relay (the relay once for each of --retentions,
against that round's broker); each prints relay / broker, and the table the medians. CPU
seconds in each window, from /proc: the relay process, Postgres (its live backends: the
relay's connections and the bench's poll; a backend that ends in the window is not
counted) and Kafka, found through the pid files scripts/services.py writes in
OUTBOX_CACHE_DIR (blank when they are not there); for the broker, this process (the
producer) instead of the relay.
Uses DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS as given (`eval "$(scripts/services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaProducer

from bench.compare.services import Services
from bench.shared.cli import add_services, check_services, parser, run_guarded
from bench.shared.database import load_sql, private_database
from bench.shared.processes import Proc, launch, poll_until, relay_env
from bench.shared.procstat import cpu_between, cpu_seconds, loadavg, sample, total_cpu
from bench.shared.tables import markdown_table
from bench.shared.topics import TopicCounter, private_topic
from bench.shared.warm_memory import warm
from producer_lib import Event, Outbox

Q = load_sql("large_events.sql")
TOPIC = "large"
EVENT_TYPE = "LargeEvent"
BLOBS = 4  # distinct payloads (random bytes: incompressible, as Postgres stores them)
DRAIN_TIMEOUT_S = 600.0
WARM_UP = 64  # small events before the backlog
# Warm free memory made before each window (bench/shared/warm_memory.py), in backlogs: the relay's
# window has Postgres write the backlog (its WAL and pages, about twice the payload) and
# then the broker append it; the broker's window only the append.
WARM_FACTOR = 3
MiB = 1024 * 1024


@dataclass
class Round:
    retention: str
    broker_s: float
    relay_s: float
    base_rss: int
    peak_rss: int
    broker_cpu: dict[str, float | None]  # producer, postgres, kafka
    relay_cpu: dict[str, float | None]  # relay, postgres, kafka


class ServerCpu:
    """CPU seconds of the shared Postgres and Kafka over a window (None when unknown)."""

    def __init__(self, server: str, bootstrap: str) -> None:
        cache = Path(os.environ.get("OUTBOX_CACHE_DIR", "/var/cache/outbox-relay"))
        self.services = Services(server, bootstrap, own=False, cache=cache)

    def take(self) -> dict[str, dict[int, float]]:
        kafka = total_cpu(self.services.kafka_pids())
        # The live backends only: the postmaster's reaped-children time would add the whole
        # life of the backlog writer's backend, which exits in the window.
        postgres = total_cpu(self.services.postgres_pids()[1:])
        return {"postgres": postgres, "kafka": kafka}

    @staticmethod
    def between(
        before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
    ) -> dict[str, float | None]:
        return {
            name: cpu_between(before[name], after[name]) if after[name] else None
            for name in ("postgres", "kafka")
        }


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = parser(__doc__)
    add_services(p)
    p.add_argument("--events", type=int, default=300)
    p.add_argument("--sizes", default="900000,1000000", help="comma list of payload bytes")
    p.add_argument("--keys", type=int, default=30)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--claim-max-bytes", type=int, default=None, help="the relay's; default: its own"
    )
    p.add_argument(
        "--retentions",
        default="keep",
        help="comma list of the relay's retention modes, each run in every round (keep, delete)",
    )
    p.add_argument(
        "--no-warm",
        dest="warm",
        action="store_false",
        help="do not make free memory warm before each window (bench/shared/warm_memory.py)",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="in every round, bench/steady_floor.py's loop drains the backlog too (a floor\n"
        "for the relay: one delete-returning statement and one produce request a cycle)",
    )
    p.add_argument(
        "--postgres-alone",
        action="store_true",
        help="in every round, one connection of this process reads the backlog's payloads and\n"
        "deletes them, as many rows at a time as the relay claims: the relay's Postgres work\n"
        "without the relay or Kafka",
    )
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    check_services(p, args)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        p.error("--sizes takes a comma list of byte counts")
    if not args.sizes or any(s < 1 for s in args.sizes):
        p.error("--sizes takes positive byte counts")
    args.retentions = [r for r in args.retentions.split(",") if r]
    if not args.retentions or any(r not in ("keep", "delete") for r in args.retentions):
        p.error("--retentions takes a comma list of keep and delete")
    if min(args.events, args.keys, args.partitions, args.rounds) < 1:
        p.error("--events, --keys, --partitions and --rounds must be positive")
    return args


def blobs(size: int, seed: int) -> list[bytes]:
    return [random.Random(seed + i).randbytes(size) for i in range(BLOBS)]


def key_of(i: int, keys: int) -> str:
    return f"key-{i % keys}"


def max_message_bytes(size: int) -> int:
    # Room for the record's key, headers and the batch's own header.
    return size + 64 * 1024


async def broker_round(
    args: argparse.Namespace, bootstrap: str, topic: str, size: int, servers: ServerCpu
) -> tuple[float, dict[str, float | None]]:
    """Seconds for an aiokafka producer to send the backlog's records and get every ack, and
    the CPU seconds spent meanwhile."""
    payloads = blobs(size, args.seed)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        max_request_size=max(1_048_576, max_message_bytes(size)),
    )
    await producer.start()
    try:
        # Every partition's leader known before the clock starts, as the relay's are after
        # its warm-up events.
        await asyncio.gather(
            *[await producer.send(topic, value=b"x", partition=p) for p in range(args.partitions)]
        )
        headers = [("content-type", b"application/octet-stream")]
        if args.warm:
            warm(WARM_FACTOR * args.events * size)
        cpu_before, own_before = servers.take(), own_cpu()
        start = time.perf_counter()
        sends = [
            await producer.send(
                topic,
                key=key_of(i, args.keys).encode(),
                value=payloads[i % BLOBS],
                headers=[
                    ("event_id", str(uuid.uuid4()).encode()),
                    ("event_type", EVENT_TYPE.encode()),
                    *headers,
                ],
            )
            for i in range(args.events)
        ]
        await asyncio.gather(*sends)
        took = time.perf_counter() - start
        cpu = {"producer": own_cpu() - own_before, **ServerCpu.between(cpu_before, servers.take())}
        return took, cpu
    finally:
        await producer.stop()


def write_backlog(url: str, args: argparse.Namespace, size: int) -> None:
    """The whole backlog in one transaction, so the relay finds it all at once."""
    payloads = blobs(size, args.seed)
    outbox = Outbox(max_event_bytes=max_message_bytes(size))
    with psycopg.connect(url) as conn:
        for start in range(0, args.events, 10):
            outbox.emit_batch(
                conn,
                [
                    Event(
                        topic=TOPIC,
                        key=key_of(i, args.keys),
                        event_type=EVENT_TYPE,
                        payload=payloads[i % BLOBS],
                    )
                    for i in range(start, min(args.events, start + 10))
                ],
            )


async def wait_drained(url: str, relay: Proc, timeout_s: float) -> None:
    """Until no row is left unpublished."""
    with psycopg.connect(url, autocommit=True) as conn:

        async def drained() -> bool:
            row = conn.execute(Q["large_unpublished"]).fetchone()
            return row is not None and int(row[0]) == 0

        await poll_until(drained, relay, timeout_s, "not drained")


async def wait_on_topic(
    bootstrap: str, topic: str, args: argparse.Namespace, loop: Proc, timeout_s: float
) -> None:
    """Until every record of the warm-up and the backlog is on the topic."""
    async with TopicCounter(bootstrap, topic, args.partitions) as counter:
        wanted: int = args.events + WARM_UP

        async def all_there() -> bool:
            return await counter.count() >= wanted

        await poll_until(all_there, loop, timeout_s, "not all on the topic")


async def relay_round(
    args: argparse.Namespace,
    server: str,
    bootstrap: str,
    size: int,
    retention: str,
    logdir: Path,
    servers: ServerCpu,
) -> tuple[float, int, int, dict[str, float | None]]:
    """Seconds for the relay to drain the backlog, its RSS before, its peak RSS and the CPU
    seconds spent in the drain. retention "floor": bench/steady_floor.py's loop instead, its
    drain ending once every record is on the topic (it deletes rows before their acks)."""
    relay: Proc | None = None
    with private_database(server, "bench_large") as (url, dbname):
        prefix = f"{dbname}."
        limit = {"max.message.bytes": str(max_message_bytes(size))}
        async with private_topic(bootstrap, prefix + TOPIC, args.partitions, limit) as topic:
            try:
                env = relay_env(url, bootstrap, prefix)
                env["OUTBOX_KAFKA_MAX_REQUEST_SIZE"] = str(max(1_048_576, max_message_bytes(size)))
                if args.claim_max_bytes is not None:
                    env["OUTBOX_CLAIM_MAX_BYTES"] = str(args.claim_max_bytes)
                env["OUTBOX_RETENTION"] = retention
                if retention == "floor":
                    cmd = [sys.executable, "-m", "bench", "steady_floor", "--gather-s", "0"]
                    cmd += ["--limit", str(rows_claimed(args, size))]
                else:
                    cmd = [sys.executable, "-m", "relay.cli", "run"]
                relay = launch(f"{retention}-{dbname}", cmd, env, logdir)
                # Up, holding its shards and knowing the partitions' leaders: small events on
                # enough keys to reach every partition are published first.
                with psycopg.connect(url) as conn:
                    Outbox().emit_batch(
                        conn,
                        [Event(TOPIC, f"warm-up-{n}", EVENT_TYPE, b"x") for n in range(WARM_UP)],
                    )
                await wait_drained(url, relay, 60)
                before = sample(relay.pid)
                assert before is not None
                if args.warm:
                    # The backlog's write, then the broker's.
                    warm(WARM_FACTOR * args.events * size)
                start = time.perf_counter()
                await asyncio.to_thread(write_backlog, url, args, size)
                cpu_before, relay_cpu = servers.take(), cpu_seconds(relay.pid)
                assert relay_cpu is not None
                committed = time.perf_counter()
                await wait_drained(url, relay, DRAIN_TIMEOUT_S)
                if retention == "floor":
                    await wait_on_topic(bootstrap, topic, args, relay, DRAIN_TIMEOUT_S)
                drained = time.perf_counter() - committed
                after = sample(relay.pid)
                assert after is not None
                cpu = {
                    "relay": after.cpu_s - relay_cpu,
                    **ServerCpu.between(cpu_before, servers.take()),
                }
                async with TopicCounter(bootstrap, topic, args.partitions) as counter:
                    on_topic = await counter.count()
                if on_topic < args.events + WARM_UP:
                    raise RuntimeError(
                        f"{on_topic} records on {topic}, expected {args.events + WARM_UP}"
                    )
                print(
                    f"[large] relay wrote the backlog in {committed - start:.1f} s, "
                    f"drained it in {drained:.2f} s",
                    flush=True,
                )
                return drained, before.rss_bytes, after.peak_rss_bytes, cpu
            finally:
                if relay is not None:
                    relay.stop()


def read_and_delete(conn: psycopg.Connection[tuple[int, bytes]], take: int) -> int:
    """Every row of the backlog read (payloads in binary, as the relay) and deleted, take
    rows at a time: the rows read."""
    after, read = 0, 0
    with conn.cursor(binary=True) as cur:
        while rows := cur.execute(Q["large_read"], {"after": after, "rows": take}).fetchall():
            cur.execute(Q["large_delete"], {"ids": [row[0] for row in rows]})
            after, read = rows[-1][0], read + len(rows)
    return read


async def postgres_round(
    args: argparse.Namespace, server: str, size: int, servers: ServerCpu
) -> tuple[float, dict[str, float | None]]:
    """Seconds for one connection to read and delete the backlog, and the CPU seconds spent
    meanwhile (this process, Postgres, Kafka)."""
    with private_database(server, "bench_large") as (url, _):
        if args.warm:
            warm(WARM_FACTOR * args.events * size)
        await asyncio.to_thread(write_backlog, url, args, size)
        # Connected before the first sample and closed after the last: Postgres's CPU is
        # read from its live backends.
        with psycopg.connect(url, autocommit=True) as conn:
            cpu_before, own_before = servers.take(), own_cpu()
            start = time.perf_counter()
            read = await asyncio.to_thread(read_and_delete, conn, rows_claimed(args, size))
            took = time.perf_counter() - start
            # Under the relay's name, for the table: the client's work in the relay's place.
            cpu = {
                "relay": own_cpu() - own_before,
                **ServerCpu.between(cpu_before, servers.take()),
            }
        if read != args.events:
            raise RuntimeError(f"read {read} rows of {args.events}")
        return took, cpu


def rows_claimed(args: argparse.Namespace, size: int) -> int:
    """The rows of this size the relay's byte budget (16 MiB by default) claims at once."""
    return max(1, (args.claim_max_bytes or 16 * MiB) // size)


def contenders(args: argparse.Namespace) -> list[str]:
    """What drains the backlog in each round, after the broker: the relay in each retention
    mode, then the floor loop and Postgres alone when asked."""
    extra = (["floor"] if args.floor else []) + (["postgres"] if args.postgres_alone else [])
    return [*args.retentions, *extra]


async def run_size(args: argparse.Namespace, size: int, logdir: Path) -> list[Round]:
    server, bootstrap = args.database_url, args.bootstrap
    servers = ServerCpu(server, bootstrap)
    rounds: list[Round] = []
    for n in range(args.rounds):
        name = f"bench_large_broker_{uuid.uuid4().hex[:8]}"
        limit = {"max.message.bytes": str(max_message_bytes(size))}
        async with private_topic(bootstrap, name, args.partitions, limit) as topic:
            broker_s, broker_cpu = await broker_round(args, bootstrap, topic, size, servers)
        for retention in contenders(args):
            if retention == "postgres":
                base = peak = 0  # no relay process
                relay_s, relay_cpu = await postgres_round(args, server, size, servers)
            else:
                relay_s, base, peak, relay_cpu = await relay_round(
                    args, server, bootstrap, size, retention, logdir, servers
                )
            rounds.append(Round(retention, broker_s, relay_s, base, peak, broker_cpu, relay_cpu))
            print(
                f"[large] {size:,} B round {n + 1}, retention={retention}: "
                f"broker {args.events / broker_s:,.0f} ev/s, "
                f"relay {args.events / relay_s:,.0f} ev/s, relay / broker {broker_s / relay_s:.2f}; "
                f"relay RSS {base / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB; "
                f"CPU s broker {cpu_text(broker_cpu)}, relay {cpu_text(relay_cpu)}",
                flush=True,
            )
    return rounds


def mib(nbytes: float) -> str:
    return f"{nbytes / MiB:.0f}" if nbytes else "-"  # "-": no relay process (Postgres alone)


def cpu_text(cpu: dict[str, float | None]) -> str:
    return " ".join(f"{name}={'-' if v is None else f'{v:.2f}'}" for name, v in cpu.items())


def median_cpu(rounds: list[Round], side: str, name: str) -> str:
    values = [v for r in rounds if (v := getattr(r, side).get(name)) is not None]
    return f"{statistics.median(values):.2f}" if values else ""


def report(args: argparse.Namespace, results: dict[int, list[Round]]) -> str:
    header = [
        "payload B",
        "retention",
        "broker ev/s",
        "broker MB/s",
        "relay ev/s",
        "relay MB/s",
        "relay / broker",
        "relay RSS before MiB",
        "relay peak RSS MiB",
        "broker CPU s: producer / Postgres / Kafka",
        "relay CPU s: relay / Postgres / Kafka",
    ]
    rows = []
    for size, all_rounds in results.items():
        for retention in contenders(args):
            rounds = [r for r in all_rounds if r.retention == retention]
            broker = statistics.median(args.events / r.broker_s for r in rounds)
            relay = statistics.median(args.events / r.relay_s for r in rounds)
            ratio = statistics.median(r.broker_s / r.relay_s for r in rounds)
            rows.append(
                [
                    f"{size:,}",
                    retention,
                    f"{broker:,.0f}",
                    f"{broker * size / 1e6:,.0f}",
                    f"{relay:,.0f}",
                    f"{relay * size / 1e6:,.0f}",
                    f"{ratio:.2f}",
                    mib(statistics.median(r.base_rss for r in rounds)),
                    mib(max(r.peak_rss for r in rounds)),
                    " / ".join(
                        median_cpu(rounds, "broker_cpu", n)
                        for n in ("producer", "postgres", "kafka")
                    ),
                    " / ".join(
                        median_cpu(rounds, "relay_cpu", n) for n in ("relay", "postgres", "kafka")
                    ),
                ]
            )
    text = "\n".join(markdown_table([header, *rows], 2)) + "\n"
    text += f"\n{args.events} events over {args.keys} keys, {args.partitions} partitions, "
    text += f"{args.rounds} rounds (medians; peak: the highest); load average {loadavg()}\n"
    return text


async def run(args: argparse.Namespace) -> int:
    results: dict[int, list[Round]] = {}
    with tempfile.TemporaryDirectory(prefix="outbox-large-") as tmp:
        for size in args.sizes:
            results[size] = await run_size(args, size, Path(tmp))
    print(report(args, results))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_guarded("large_events", lambda: asyncio.run(run(args)))
