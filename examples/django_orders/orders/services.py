"""Placing an order: the order row and its OrderPlaced event commit together or not at all."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import connection, transaction

from examples.django_orders.orders.models import Order
from producer_lib import Outbox

outbox = Outbox()


def place_order(customer: str, total_cents: int, *, idempotency_key: str | None = None) -> Order:
    with transaction.atomic():
        order = Order.objects.create(customer=customer, total_cents=total_cents)
        record_placed(order, idempotency_key=idempotency_key)
        return order


def record_placed(order: Order, *, idempotency_key: str | None = None) -> uuid.UUID:
    """The event of an order, on Django's connection: call it inside transaction.atomic()
    (outside one, Django commits each statement by itself and emit refuses)."""
    return outbox.emit(
        connection,
        topic=settings.ORDERS_TOPIC,
        key=str(order.pk),
        event_type="OrderPlaced",
        payload={"order_id": order.pk, "total_cents": order.total_cents},
        idempotency_key=idempotency_key,
    )
