"""The example's settings, from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    database_url: str  # a SQLAlchemy URL: postgresql+asyncpg://user:password@host/db
    kafka_bootstrap_servers: str
    orders_topic: str = "orders"
    consumer_group: str = "fastapi-orders-shipping"

    @classmethod
    def from_env(cls) -> Config:
        url = os.environ["DATABASE_URL"]
        if url.startswith("postgresql://"):  # the libpq form: asyncpg is this service's driver
            url = "postgresql+asyncpg://" + url.removeprefix("postgresql://")
        return cls(
            database_url=url,
            kafka_bootstrap_servers=os.environ["KAFKA_BOOTSTRAP_SERVERS"],
            orders_topic=os.environ.get("ORDERS_TOPIC", cls.orders_topic),
            consumer_group=os.environ.get("CONSUMER_GROUP", cls.consumer_group),
        )
