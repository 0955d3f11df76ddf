"""Kafka helpers for tests: private topics and reading a topic back whole."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


def unique_topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def create_topics(
    bootstrap: str, names: list[str], partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """configs: topic-level settings, e.g. {"max.message.bytes": "20000"}."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(
                    n, num_partitions=partitions, replication_factor=1, topic_configs=configs or {}
                )
                for n in names
            ]
        )
        # Topic creation is asynchronous on the broker: wait until metadata shows leaders.
        deadline = time.monotonic() + 30
        while True:
            described = await admin.describe_topics(names)
            ready = all(
                t.get("error_code", 0) == 0 and len(t.get("partitions", [])) == partitions
                for t in described
            )
            if ready or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        with contextlib.suppress(Exception):
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def read_topic(bootstrap: str, topic: str, *, timeout: float = 30.0) -> list[Record]:
    """Everything on the topic from the beginning up to its end offsets at call time."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        deadline = time.monotonic() + timeout
        while partitions is None and time.monotonic() < deadline:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            raise LookupError(f"topic {topic!r} does not exist")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        records: list[Record] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        while remaining:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"read {len(records)} records of {topic!r}; still missing {remaining}"
                )
            batch = await consumer.getmany(*remaining, timeout_ms=int(min(left, 1.0) * 1000))
            for msgs in batch.values():
                for m in msgs:
                    records.append(
                        Record(m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers))
                    )
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        records.sort(key=lambda r: (r.partition, r.offset))
        return records
    finally:
        await consumer.stop()
