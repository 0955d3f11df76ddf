"""The smoke round trip: a row into Postgres, read back, produced to Kafka, consumed back.

The first link the foundation proved; kept as a check of the services by
tests/integration/test_smoke.py against a private database and topic.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


@dataclass(frozen=True)
class RoundTrip:
    row_id: str
    sent: bytes
    received: bytes
    partition: int
    offset: int
    seconds: float


def write_and_read_row(database_url: str) -> tuple[str, bytes]:
    row_id = str(uuid.uuid4())
    body = {"order_id": row_id, "amount_cents": 1234}
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS smoke_orders (id uuid PRIMARY KEY, body jsonb NOT NULL)"
        )
        conn.execute(
            "INSERT INTO smoke_orders (id, body) VALUES (%s, %s)", (row_id, json.dumps(body))
        )
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT body::text FROM smoke_orders WHERE id = %s", (row_id,)
        ).fetchone()
    if row is None:
        raise RuntimeError("the committed smoke row was not found")
    return row_id, str(row[0]).encode()


async def produce_and_consume(
    bootstrap: str, topic: str, key: str, value: bytes
) -> tuple[bytes, int, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, meta.partition)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        record = await asyncio.wait_for(consumer.getone(tp), timeout=30)
    finally:
        await consumer.stop()
    return bytes(record.value), int(meta.partition), int(meta.offset)


def round_trip(database_url: str, bootstrap: str, topic: str) -> RoundTrip:
    t0 = time.perf_counter()
    row_id, sent = write_and_read_row(database_url)
    received, partition, offset = asyncio.run(produce_and_consume(bootstrap, topic, row_id, sent))
    return RoundTrip(row_id, sent, received, partition, offset, time.perf_counter() - t0)


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.support.kafka import create_topics, unique_topic_name

    database_url = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = unique_topic_name("smoke")
    asyncio.run(create_topics(bootstrap, [topic]))
    result = round_trip(database_url, bootstrap, topic)
    ok = result.received == result.sent
    print(
        f"smoke: row {result.row_id} -> Postgres -> Kafka {topic}[{result.partition}]@{result.offset}"
        f" -> consumed back {'identical' if ok else 'DIFFERENT'} in {result.seconds * 1000:.0f} ms"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
