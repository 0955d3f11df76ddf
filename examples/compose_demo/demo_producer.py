"""The compose demo's producer: DEMO_ORDERS orders, each committed with its OrderPlaced
event in one transaction by producer_lib, then it exits.

Environment: DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, DEMO_TOPIC (orders), DEMO_ORDERS (50),
DEMO_PARTITIONS (3), DEMO_INTERVAL_S (0.1, pause between orders).

It waits for Postgres, the outbox schema (`outbox-relay migrate`) and Kafka itself: the
compose file's health-gated depends_on is not honoured by every runner. Orders and events
are deterministic (order i has the same id and idempotency key every time), so a restarted
producer writes nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from outbox_core.queries import parse_blocks
from producer_lib import Outbox

SQL = parse_blocks(Path(__file__).with_name("demo.sql").read_text(), "demo.sql")

T = TypeVar("T")
NAMESPACE = uuid.UUID("5b8c2d1e-0c7a-4f52-9d0e-6f1b2a3c4d5e")


def say(msg: str) -> None:
    print(f"demo-producer: {msg}", flush=True)


def wait_for(what: str, call: Callable[[], T], timeout: float = 300.0) -> T:
    """call() until it stops raising; a line every 5 s while waiting."""
    deadline = time.monotonic() + timeout
    last_said = 0.0
    while True:
        try:
            return call()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting for {what}: {exc}") from exc
            if time.monotonic() - last_said > 5:
                say(f"waiting for {what} ({type(exc).__name__}: {str(exc).strip()[:120]})")
                last_said = time.monotonic()
            time.sleep(1.0)


def schema_ready(url: str) -> None:
    with psycopg.connect(url, connect_timeout=5) as conn:
        conn.execute(SQL["schema_probe"])


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, partitions, replication_factor=1)])
    finally:
        await admin.close()


def main() -> int:
    url = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = os.environ.get("DEMO_TOPIC", "orders")
    orders = int(os.environ.get("DEMO_ORDERS", "50"))
    partitions = int(os.environ.get("DEMO_PARTITIONS", "3"))
    interval = float(os.environ.get("DEMO_INTERVAL_S", "0.1"))

    wait_for("the outbox schema (outbox-relay migrate)", lambda: schema_ready(url))
    wait_for("Kafka", lambda: asyncio.run(create_topic(bootstrap, topic, partitions)))
    outbox = Outbox()
    with psycopg.connect(url) as conn:
        conn.execute(SQL["demo_orders_create"])
        conn.commit()
        for i in range(orders):
            order_id = uuid.uuid5(NAMESPACE, f"order-{i}")
            customer = f"customer-{i % 7}"
            amount = 100 + (i * 37) % 9000
            # The business row and its event commit together, or not at all.
            with conn.transaction():
                conn.execute(
                    SQL["demo_order_insert"],
                    {"order_id": order_id, "customer": customer, "amount_cents": amount},
                )
                event_id = outbox.emit(
                    conn,
                    topic=topic,
                    key=customer,
                    event_type="OrderPlaced",
                    payload={
                        "order_id": str(order_id),
                        "customer": customer,
                        "amount_cents": amount,
                    },
                    idempotency_key=f"demo-order-{i}",
                )
            say(f"order {i + 1}/{orders} {order_id} committed with event {event_id}")
            time.sleep(interval)
    say(f"{orders} orders written, each with its OrderPlaced event in the same transaction")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
