"""The compose demo's consumer: `outbox-consumer run demo_consumer:build`.

Each OrderPlaced event becomes one invoice row, written in the same transaction in which
consumer_lib records the event_id in processed_events: a redelivered event finds its
event_id there and is skipped, so every order is invoiced exactly once.

Environment: DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, DEMO_TOPIC (orders), DEMO_GROUP
(billing), DEMO_PARTITIONS (3). /metrics, /healthz and /readyz on port 9401.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import psycopg

from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings, KafkaSecurity, PsycopgAsync
from outbox_core.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_name("demo.sql").read_text(), "demo.sql")


def say(msg: str) -> None:
    print(f"demo-consumer: {msg}", flush=True)


async def _retry(what: str, call: Any, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    last_said = 0.0
    while True:
        try:
            await call()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting for {what}: {exc}") from exc
            if time.monotonic() - last_said > 5:
                say(f"waiting for {what} ({type(exc).__name__}: {str(exc).strip()[:120]})")
                last_said = time.monotonic()
            await asyncio.sleep(1.0)


async def _prepare_database(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=5) as conn:
        # processed_events comes with the outbox schema (outbox-relay migrate).
        await conn.execute(SQL["processed_events_probe"])
        await conn.execute(SQL["demo_invoices_create"])


async def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(topic, partitions, replication_factor=1)])
    finally:
        await admin.close()


async def build() -> ConsumerApp:
    url = os.environ["DATABASE_URL"]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = os.environ.get("DEMO_TOPIC", "orders")
    partitions = int(os.environ.get("DEMO_PARTITIONS", "3"))
    await _retry("the outbox schema (outbox-relay migrate)", lambda: _prepare_database(url))
    # Subscribing to a topic that does not exist yet would wait for a metadata refresh.
    await _retry("Kafka", lambda: _create_topic(bootstrap, topic, partitions))

    app = ConsumerApp(
        ConsumerSettings(
            bootstrap_servers=bootstrap,
            group_id=os.environ.get("DEMO_GROUP", "billing"),
            security=KafkaSecurity.plaintext(),  # the demo's broker; production uses SSL
            http_host="0.0.0.0",
            http_port=9401,
        ),
        PsycopgAsync(url),
    )

    @app.handler(topic, "OrderPlaced")
    async def invoice(event: ConsumedEvent, conn: Any) -> None:
        order = event.payload
        await conn.execute(
            SQL["demo_invoice_insert"],
            {
                "order_id": order["order_id"],
                "customer": order["customer"],
                "amount_cents": order["amount_cents"],
                "event_id": event.event_id,
            },
        )
        say(
            f"invoiced order {order['order_id']} (event {event.event_id}, partition {event.partition})"
        )

    return app
