"""The service's consumer: books a shipment for each placed order, exactly once."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from consumer_lib import (
    ConsumedEvent,
    ConsumerApp,
    ConsumerSettings,
    KafkaSecurity,
    SqlAlchemyAsync,
)
from examples.fastapi_orders.config import Config
from examples.fastapi_orders.models import Shipment


def build_consumers(config: Config, engine: AsyncEngine) -> ConsumerApp:
    settings = ConsumerSettings(
        bootstrap_servers=config.kafka_bootstrap_servers,
        group_id=config.consumer_group,
        security=KafkaSecurity.plaintext(),  # a local broker; production uses SSL or SASL_SSL
        shutdown_grace_s=5.0,
    )
    app = ConsumerApp(settings, SqlAlchemyAsync(engine))

    @app.handler(config.orders_topic, "OrderPlaced")
    async def book_shipment(event: ConsumedEvent, session: AsyncSession) -> None:
        # In the transaction that records event_id in processed_events: a redelivered event
        # finds it recorded and never reaches this handler again.
        assert event.event_id is not None
        session.add(
            Shipment(order_id=uuid.UUID(event.payload["order_id"]), event_id=event.event_id)
        )

    return app
