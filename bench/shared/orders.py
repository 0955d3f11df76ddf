"""The order workload the benchmarks share: one-row orders over DISTINCT_KEYS customers with
a ~300-byte JSON payload, built before the clock starts, and the event each one becomes.

bench/emit_overhead.py writes them with and without emit, bench/consumer_throughput.py puts
them on topics, and the relay benchmarks (bench/compare/, bench/steady_producer.py) load
them as a backlog of sequenced events.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from producer_lib import Event

DISTINCT_KEYS = 1000


TOPIC = "orders"


EVENT_TYPE = "OrderPlaced"


@dataclass(frozen=True)
class Order:
    """One transaction's input, built before the clock starts."""

    customer: str
    amount_cents: int
    details: dict[str, Any]


def make_orders(rng: random.Random, count: int) -> list[Order]:
    orders: list[Order] = []
    for _ in range(count):
        customer = f"customer-{rng.randrange(DISTINCT_KEYS):04d}"
        lines = [(rng.randrange(1_000_000), rng.randint(1, 5), rng.randint(100, 20_000))]
        lines.append((rng.randrange(1_000_000), rng.randint(1, 5), rng.randint(100, 20_000)))
        items = [
            {"sku": f"SKU-{sku:06d}", "quantity": qty, "unit_price_cents": price}
            for sku, qty, price in lines
        ]
        amount = sum(qty * price for _, qty, price in lines)
        details: dict[str, Any] = {
            "customer_id": customer,
            "amount_cents": amount,
            "currency": "EUR",
            "items": items,
            "shipping": {"method": "standard", "country": "DE", "postcode": "10115"},
            "placed_at": "2024-11-29T10:51:00+00:00",
        }
        orders.append(Order(customer, amount, details))
    return orders


def order_payload(order_id: int, order: Order) -> dict[str, Any]:
    return {"order_id": order_id, **order.details}


def sequenced_order_event(rng: random.Random, keys: int, seq: int, order: Order) -> Event:
    """The relay benchmarks' event: a random one of `keys` customers as its key, and its
    sequence number in the payload (for latency and loss accounting)."""
    return Event(
        TOPIC,
        f"customer-{rng.randrange(keys):04d}",
        EVENT_TYPE,
        {"seq": seq, **order_payload(seq, order)},
    )
