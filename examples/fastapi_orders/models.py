"""The service's own tables: orders it takes, shipments its consumer books for them."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import DateTime, ForeignKey, String, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    # Chosen by the client, so a retried request cannot place the order twice.
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(200))
    total_cents: Mapped[int]
    created_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class Shipment(Base):
    """Booked by the consumer from an OrderPlaced event; one per order (applied once)."""

    __tablename__ = "shipments"

    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orders.id"))
    event_id: Mapped[uuid.UUID]
    booked_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
