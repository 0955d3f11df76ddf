"""The topics bench/consumer_throughput.py reads: one per partition count, each holding the
same orders as relay-shaped records (event_id, event_type and content-type headers)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer

from bench.shared.orders import EVENT_TYPE, make_orders, order_payload
from bench.shared.topics import create_topic
from producer_lib import Outbox


async def fill_topics(
    bootstrap: str, prefix: str, partition_counts: Sequence[int], events: int, seed: int
) -> tuple[dict[int, str], int]:
    """One topic per partition count, each holding the same `events` orders; returns the
    topics and the payload size."""
    rng = random.Random(seed)
    orders = make_orders(rng, events)
    outbox = Outbox()
    serialized = [outbox.serializer(order_payload(i + 1, o)) for i, o in enumerate(orders)]
    records = [
        (
            o.customer.encode(),
            s.data,
            [
                ("event_id", str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()),
                ("event_type", EVENT_TYPE.encode()),
                ("content-type", s.content_type.encode()),
            ],
        )
        for o, s in zip(orders, serialized, strict=True)
    ]
    topics = {n: f"{prefix}-p{n}" for n in partition_counts}
    for partitions, topic in topics.items():
        await create_topic(bootstrap, topic, partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=10
    )
    await producer.start()
    try:
        for topic in topics.values():
            futures = [
                await producer.send(topic, value, key=key, headers=headers)
                for key, value, headers in records
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return topics, len(serialized[0].data)
