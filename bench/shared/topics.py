"""The benchmarks' Kafka topics: a fresh one per run or drain, removed at the end, and the
count of records on one from its partitions' end offsets."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(
    bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        await client.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1,
                    topic_configs=configs or {},
                )
            ]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = await client.describe_topics([name])
            if all(
                t.get("error_code", 0) == 0 and len(t.get("partitions", [])) == partitions
                for t in described
            ):
                return
            await asyncio.sleep(0.1)
    finally:
        await client.close()


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    if not names:
        return
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        with contextlib.suppress(Exception):
            await client.delete_topics(names)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def private_topic(
    bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """A topic of this run's own, deleted on the way out."""
    try:
        await create_topic(bootstrap, name, partitions, configs)
        yield name
    finally:
        await delete_topics(bootstrap, [name])


# The broker stamps each record as it appends it: commit-to-append latency is measured on
# the broker's clock, the same machine's as Postgres's.
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


class TopicCounter:
    """Records on a topic, from the sum of its partitions' end offsets."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]

    async def __aenter__(self) -> TopicCounter:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def count(self) -> int:
        ends = await self._consumer.end_offsets(self._tps)
        return int(sum(ends.values()))
