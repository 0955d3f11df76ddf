"""The audit of a drained topic: every record from offset 0 to the end offsets, read once
after the contender stopped, so the events reported are counted exactly, not sampled.

A backlog event's payload is producer_lib's compact JSON of {"seq": N, ...} (bench/shared/orders.py
sequenced_order_event) and its record key the customer key; only seq is read from each
payload. Per key, the backlog's seqs follow commit order, so a key's first-seen seqs must
rise in offset order: a lower one after a higher one is an order violation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from bench.compare.common import outbox_connection, outbox_rows

SEQ_PREFIX = b'{"seq":'
FETCH_RECORDS = 100_000
FETCH_BYTES = 16 * 2**20
STALL_S = 60.0


@dataclass(frozen=True)
class Audit:
    records: int  # on the topic, duplicates included
    distinct: int  # distinct events (seqs) among them
    lost: int  # seqs of the backlog neither on the topic nor still unpublished in the outbox
    unpublished: int  # rows still unpublished in the outbox (a drain stopped early)
    order_violations: int
    unreadable: int = 0  # records without a backlog payload (no seq): counted, not read

    @property
    def duplicates(self) -> int:
        return self.records - self.distinct


def seq_of(value: bytes) -> int:
    if value.startswith(SEQ_PREFIX):
        return int(value[len(SEQ_PREFIX) : value.index(b",", len(SEQ_PREFIX))])
    # Another serializer's spacing or key order, or a CloudEvents structured envelope
    # with the payload as its data.
    doc = json.loads(value)
    return int(doc["data"]["seq"] if "specversion" in doc else doc["seq"])


class Tally:
    """Seqs seen and, per key, the highest first-seen seq (records fed in offset order)."""

    def __init__(self) -> None:
        self.records = 0
        self.seen: set[int] = set()
        self.highest: dict[bytes | None, int] = {}
        self.violations = 0
        self.unreadable = 0

    def add(self, items: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        seen, highest = self.seen, self.highest
        for key, value in items:
            self.records += 1
            try:
                seq = seq_of(value or b"")
            except (ValueError, KeyError, TypeError):
                # Reported, not fatal: a contender's odd record must not cost the run
                # (the events it should have carried show up as lost).
                self.unreadable += 1
                continue
            if seq in seen:
                continue  # a duplicate: its place says nothing about order
            seen.add(seq)
            top = highest.get(key, -1)
            if seq < top:
                self.violations += 1
            else:
                highest[key] = seq


async def read_whole(
    bootstrap: str,
    topic: str,
    partitions: int,
    take: Callable[[Sequence[ConsumerRecord[bytes, bytes]]], None],
    transactional: bool = False,
) -> int:
    """Hand every record of the topic, offset 0 to the end offsets at the start, to take
    (one partition's fetch at a time, in offset order); returns how many there were.
    transactional: a topic written in Kafka transactions, read read_committed (its
    commit markers take offsets, so there are fewer records than offsets)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed" if transactional else "read_uncommitted",
        # With no group and no committed offset the consumer resets on its own; "latest"
        # could win against the seek below and read nothing.
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=4 * FETCH_BYTES,
    )
    await consumer.start()
    read = 0
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        left = {tp for tp in tps if ends[tp] > 0}
        idle_since = time.monotonic()
        while left:
            batches = await consumer.getmany(*left, timeout_ms=1000, max_records=FETCH_RECORDS)
            for tp, records in batches.items():
                wanted = [r for r in records if r.offset < ends[tp]]
                read += len(wanted)
                take(wanted)
            if batches:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > STALL_S:
                raise RuntimeError(f"reading {topic}: nothing read for {STALL_S:.0f} s")
            # The consumer's position, not the last record seen: it is where the next
            # fetch starts, whatever the records came in.
            for tp in list(left):
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
        if read != sum(ends.values()) and not transactional:
            # Nothing compacts or aborts on these topics: every offset below the end holds
            # one record, so a shortfall is the reader's own fault, never the contender's.
            raise RuntimeError(f"reading {topic}: read {read:,} of {sum(ends.values()):,} records")
    finally:
        await consumer.stop()
    return read


async def read_topic(
    bootstrap: str, topic: str, partitions: int, transactional: bool = False
) -> Tally:
    tally = Tally()
    await read_whole(
        bootstrap,
        topic,
        partitions,
        lambda records: tally.add((r.key, r.value) for r in records),
        transactional,
    )
    return tally


def unpublished_seqs(url: str) -> set[int]:
    conn, statements = outbox_connection(url)
    try:
        return {int(row[0]) for row in outbox_rows(conn, statements["outbox_unpublished_seqs"])}
    finally:
        conn.close()


async def audit_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    events: int,
    url: str | None,
    transactional: bool = False,
) -> Audit:
    """url: the contender's outbox, for drains that settle rows there (its unpublished rows
    are not lost, only not yet published); None for Debezium, which leaves every row.
    transactional: read read_committed (a relay with kafka_transactions)."""
    tally = await read_topic(bootstrap, topic, partitions, transactional)
    pending = unpublished_seqs(url) if url is not None else set()
    lost = sum(1 for seq in range(events) if seq not in tally.seen and seq not in pending)
    return Audit(
        records=tally.records,
        distinct=len(tally.seen),
        lost=lost,
        unpublished=len(pending),
        order_violations=tally.violations,
        unreadable=tally.unreadable,
    )
