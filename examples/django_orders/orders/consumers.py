"""The shipping consumer: books a shipment for each placed order through the ORM, in the
transaction DjangoSync opens for the event. Run it as a management command
(`python -m examples.django_orders.manage run_shipping`), which sets Django up first."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings, DjangoSync, KafkaSecurity
from examples.django_orders.orders.models import Shipment


def book_shipment(event: ConsumedEvent, connection: Any) -> None:
    # Django's transaction.atomic() on this thread's connection also holds the
    # processed_events row of event_id: both commit, or neither does.
    assert event.event_id is not None
    Shipment.objects.create(order_id=int(event.payload["order_id"]), event_id=event.event_id)


def build_consumers(**overrides: Any) -> ConsumerApp:
    consumer_settings = ConsumerSettings(
        bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS,
        group_id=settings.SHIPPING_GROUP,
        security=KafkaSecurity.plaintext(),  # a local broker; production uses SSL or SASL_SSL
        **overrides,
    )
    app = ConsumerApp(consumer_settings, DjangoSync())
    app.handler(settings.ORDERS_TOPIC, "OrderPlaced")(book_shipment)
    return app
