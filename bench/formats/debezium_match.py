"""The same outbox rows through Debezium's outbox EventRouter and through the relay's
debezium format, read back and compared record by record.

producer_lib emits EVENTS of every payload kind it takes (JSON objects, bytes, pydantic
models, dataclasses) on two topics, with keys and event types in and out of ASCII, into a
private database on a Postgres with wal_level=logical. Debezium (Kafka Connect standalone,
bench/compare/debezium.py) streams them from the WAL as most users run its EventRouter:
string keys, the payload column's bytes as the value, routed by the topic column,
`table.fields.additional.placement` = settings.PLACEMENTS. It is stopped and its slot
dropped; then the relay with OUTBOX_RECORD_FORMAT=debezium publishes the same rows under
another topic prefix. Both sides' topics are read whole and matched by the `id` header
(the event id): topic, key, value and every header Debezium set must be equal, name and
bytes, but for Debezium's context headers (`__debezium.context.*`: the connector's name,
task and run id, on by default as `extended.headers.enabled`), which describe the
connector's run, not the event, and differ between two runs of Debezium itself. They are
listed, not compared. The partition is compared too, and reported, not judged: it is the
producers' partitioners' (both murmur2 of the key), not the format's.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from aiokafka import ConsumerRecord
from pydantic import BaseModel

from bench.compare.audit import read_whole
from bench.compare.common import PYTHON, say
from bench.compare.debezium import Debezium
from bench.formats.settings import PLACEMENTS, relay_settings
from bench.shared.database import private_database
from bench.shared.orders import make_orders, order_payload
from bench.shared.processes import Proc, launch, poll_until, relay_env
from bench.shared.topics import TopicCounter, create_topic, delete_topics
from producer_lib import Event, Outbox

TOPICS = ("orders", "payments")
ID_HEADER = "id"  # the EventRouter's, and the relay's default OUTBOX_DEBEZIUM_ID_HEADER
CONTEXT_PREFIX = "__debezium.context."
EMIT_CHUNK = 100  # events a transaction
WAIT_S = 300.0
SHOWN = 10  # differences printed


class Refund(BaseModel):
    refund_id: str
    amount_cents: int
    reason: str


@dataclass(frozen=True)
class Shipment:
    tracking: str
    parcels: int


def comparison_events(count: int, seed: int) -> list[Event]:
    """Every payload kind producer_lib takes, in turn, over 60 keys (ten not ASCII)."""
    rng = random.Random(seed)
    orders = make_orders(rng, 100)
    keys = [f"customer-{n:02d}" for n in range(50)] + [f"kunde-ü-{n}" for n in range(10)]
    events: list[Event] = []
    for n in range(count):
        key = rng.choice(keys)
        kind = n % 4
        if kind == 0:
            payload: object = order_payload(n, orders[n % len(orders)])
            events.append(Event("orders", key, "OrderPlaced", payload, headers={"origin": "bench"}))
        elif kind == 1:
            events.append(
                Event("payments", key, "PaymentCaptured", rng.randbytes(rng.randint(1, 512)))
            )
        elif kind == 2:
            refund = Refund(refund_id=f"r-{n}", amount_cents=rng.randint(1, 10_000), reason="ä ✓")
            events.append(Event("payments", key, "Refund.Issued", refund))
        else:
            shipment = Shipment(tracking=f"t-{n}", parcels=rng.randint(1, 4))
            events.append(Event("orders", key, "Sendung.Verschickt-ä", shipment))
    return events


def emit(url: str, events: Sequence[Event]) -> None:
    outbox = Outbox()
    with psycopg.connect(url, autocommit=False) as conn:
        for start in range(0, len(events), EMIT_CHUNK):
            outbox.emit_batch(conn, events[start : start + EMIT_CHUNK])
            conn.commit()


@dataclass(frozen=True)
class Seen:
    """One record, the prefix taken off its topic."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> list[bytes]:
        return [v for k, v in self.headers if k == name]


@dataclass
class Match:
    events: int
    compared: int = 0
    equal: int = 0
    only_debezium: int = 0
    only_relay: int = 0
    same_partition: int = 0
    debezium_headers: set[str] = field(default_factory=set)
    relay_extra_headers: set[str] = field(default_factory=set)
    differences: list[str] = field(default_factory=list)
    debezium_startup_s: float = 0.0
    debezium_s: float = 0.0
    relay_s: float = 0.0

    @property
    def differing(self) -> int:
        return self.compared - self.equal

    @property
    def ok(self) -> bool:
        return self.equal == self.compared == self.events and not (
            self.only_debezium or self.only_relay
        )


def differences(dbz: Seen, ours: Seen) -> list[str]:
    """What differs between Debezium's record and the relay's: topic, key, value and every
    header Debezium set but its context headers (by name; all values of a repeated name,
    in order)."""
    found = [
        f"{name}: Debezium {a!r}, relay {b!r}"
        for name, a, b in (("topic", dbz.topic, ours.topic), ("key", dbz.key, ours.key))
        if a != b
    ]
    if dbz.value != ours.value:
        a, b = dbz.value or b"", ours.value or b""
        at = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        found.append(f"value: {len(a)} and {len(b)} bytes, first difference at byte {at}")
    for name in dict.fromkeys(k for k, _ in dbz.headers if not k.startswith(CONTEXT_PREFIX)):
        if dbz.header(name) != ours.header(name):
            found.append(
                f"header {name}: Debezium {dbz.header(name)!r}, relay {ours.header(name)!r}"
            )
    return found


def by_id(records: list[Seen]) -> dict[str, Seen]:
    """Records by their id header; one without it (or a second one of an id) is kept
    under a name no event has, so that it counts as unmatched."""
    found: dict[str, Seen] = {}
    for n, seen in enumerate(records):
        ids = seen.header(ID_HEADER)
        name = (
            ids[0].decode(errors="replace")
            if len(ids) == 1
            else f"<record {n}: {len(ids)} id headers>"
        )
        found[name if name not in found else f"<record {n}: id {name} again>"] = seen
    return found


def compare(match: Match, debezium: list[Seen], relay: list[Seen]) -> None:
    dbz, ours = by_id(debezium), by_id(relay)
    match.debezium_headers = {k for seen in debezium for k, _ in seen.headers}
    match.relay_extra_headers = {
        k for seen in relay for k, _ in seen.headers
    } - match.debezium_headers
    match.only_debezium = len(dbz.keys() - ours.keys())
    match.only_relay = len(ours.keys() - dbz.keys())
    for event_id in sorted(dbz.keys() & ours.keys()):
        a, b = dbz[event_id], ours[event_id]
        match.compared += 1
        match.same_partition += a.partition == b.partition
        found = differences(a, b)
        if not found:
            match.equal += 1
        elif len(match.differences) < SHOWN:
            match.differences.append(f"{event_id}: " + "; ".join(found))


async def read_side(bootstrap: str, prefix: str, partitions: int) -> list[Seen]:
    seen: list[Seen] = []

    def take(records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        seen.extend(
            Seen(r.topic.removeprefix(prefix), r.partition, r.key, r.value, tuple(r.headers))
            for r in records
        )

    for topic in TOPICS:
        await read_whole(bootstrap, prefix + topic, partitions, take)
    return seen


async def until_on_topics(
    bootstrap: str, prefix: str, partitions: int, events: int, proc: Proc, what: str
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        counters = [
            await stack.enter_async_context(TopicCounter(bootstrap, prefix + topic, partitions))
            for topic in TOPICS
        ]

        async def done() -> bool:
            return sum([await counter.count() for counter in counters]) >= events

        await poll_until(done, proc, WAIT_S, f"{what} not all on the topics", every_s=0.5)


async def match_debezium(
    server: str,
    bootstrap: str,
    libs: Path,
    events: int,
    partitions: int,
    seed: int,
    run_id: str,
    logdir: Path,
) -> Match:
    """server: the admin URL of a Postgres with wal_level=logical."""
    match = Match(events)
    prefixes = {side: f"bench.{run_id}.{side}." for side in ("debezium", "relay")}
    topics = [prefix + topic for prefix in prefixes.values() for topic in TOPICS]
    for topic in topics:
        await create_topic(bootstrap, topic, partitions)
    try:
        with private_database(server, "bench_formats") as (url, _):
            dbz = Debezium(
                libs,
                logdir / "connect",
                bootstrap,
                url,
                prefixes["debezium"],
                f"bench_formats_{run_id}",
                options={"transforms.outbox.table.fields.additional.placement": PLACEMENTS},
            )
            launched = time.monotonic()
            proc = dbz.start(logdir, "debezium")
            try:
                dbz.wait_streaming(proc)
                match.debezium_startup_s = time.monotonic() - launched
                say(
                    f"debezium: streaming after {match.debezium_startup_s:.1f}s; emitting {events:,} events"
                )
                emit(url, comparison_events(events, seed))
                started = time.monotonic()
                await until_on_topics(
                    bootstrap, prefixes["debezium"], partitions, events, proc, "Debezium's records"
                )
                match.debezium_s = time.monotonic() - started
            finally:
                proc.stop()
                dbz.drop_slot()
            env = {**relay_env(url, bootstrap, prefixes["relay"]), **relay_settings("debezium")}
            started = time.monotonic()
            relay = launch("relay-debezium", [PYTHON, "-m", "relay.cli", "run"], env, logdir)
            try:
                await until_on_topics(
                    bootstrap, prefixes["relay"], partitions, events, relay, "the relay's records"
                )
                match.relay_s = time.monotonic() - started
            finally:
                relay.stop()
        debezium = await read_side(bootstrap, prefixes["debezium"], partitions)
        ours = await read_side(bootstrap, prefixes["relay"], partitions)
    finally:
        await delete_topics(bootstrap, topics)
    compare(match, debezium, ours)
    return match
