"""The service's tables: orders it takes, shipments its consumer books for them."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import ClassVar

from django.db import models

# The field annotations say what an instance attribute holds (django-stubs' generics,
# set to / read as); the mypy plugin would infer them but needs settings at check time.


class Order(models.Model):
    customer: models.CharField[str, str] = models.CharField(max_length=200)
    total_cents: models.PositiveIntegerField[int, int] = models.PositiveIntegerField()
    created_at: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        auto_now_add=True
    )
    objects: ClassVar[models.Manager[Order]] = models.Manager()


class Shipment(models.Model):
    """Booked by the consumer from an OrderPlaced event; one per order (applied once)."""

    order: models.ForeignKey[Order, Order] = models.ForeignKey(
        Order, on_delete=models.CASCADE, related_name="shipments"
    )
    order_id: int  # the column under `order`, as Django names it
    event_id: models.UUIDField[uuid.UUID, uuid.UUID] = models.UUIDField()
    booked_at: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        auto_now_add=True
    )
    objects: ClassVar[models.Manager[Shipment]] = models.Manager()
