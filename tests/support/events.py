"""An event's arguments for emit, and the hostile inputs emit must refuse before any SQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

from producer_lib import (
    InvalidEvent,
    InvalidHeader,
    PayloadTooLarge,
    ReservedHeader,
    SerializationError,
)


def emit_kwargs(key: str = "order-1", **over: Any) -> dict[str, Any]:
    """emit's keyword arguments for a valid event, with `over` replacing any of them."""
    base: dict[str, Any] = {
        "topic": "orders",
        "key": key,
        "event_type": "OrderPlaced",
        "payload": {"order_id": 1, "total": "12.50"},
        "headers": {"x-tenant": "acme"},
    }
    base.update(over)
    return base


# (name, what replaces the valid event's argument, the error emit raises) with
# Outbox(max_event_bytes=4096).
BAD_INPUTS: list[tuple[str, dict[str, Any], type[InvalidEvent]]] = [
    ("unserializable", {"payload": object()}, SerializationError),
    ("nan", {"payload": {"x": float("nan")}}, SerializationError),
    ("oversize", {"payload": {"blob": "x" * 5000}}, PayloadTooLarge),
    ("reserved-event-id", {"headers": {"event_id": "x"}}, ReservedHeader),
    ("reserved-event-type", {"headers": {"Event_Type": "x"}}, ReservedHeader),
    ("reserved-content-type", {"headers": {"Content-Type": "text/plain"}}, ReservedHeader),
    ("reserved-traceparent", {"headers": {"traceparent": "00-x"}}, ReservedHeader),
    ("reserved-tracestate", {"headers": {"TraceState": "k=v"}}, ReservedHeader),
    ("reserved-prefix", {"headers": {"outbox-shard": "1"}}, ReservedHeader),
    ("header-space", {"headers": {"bad name": "x"}}, InvalidHeader),
    ("header-not-str", {"headers": {"n": 1}}, InvalidHeader),
    ("headers-a-list", {"headers": [["n", "v"]]}, InvalidHeader),
    ("headers-a-str", {"headers": '{"n": "v"}'}, InvalidHeader),
    ("header-an-object", {"headers": {"n": {"deep": "v"}}}, InvalidHeader),
    ("empty-topic", {"topic": ""}, InvalidEvent),
    ("bad-topic", {"topic": "orders/eu"}, InvalidEvent),
    ("empty-key", {"key": "  "}, InvalidEvent),
    ("key-not-str", {"key": 42}, InvalidEvent),
    ("empty-event-type", {"event_type": ""}, InvalidEvent),
    ("bad-event-id", {"event_id": "not-a-uuid"}, InvalidEvent),
    ("naive-deliver-after", {"deliver_after": dt.datetime(2030, 1, 1)}, InvalidEvent),
    ("negative-delay", {"deliver_after": dt.timedelta(seconds=-1)}, InvalidEvent),
    ("empty-idempotency-key", {"idempotency_key": ""}, InvalidEvent),
    ("nul-in-idempotency-key", {"idempotency_key": "pay\x001"}, InvalidEvent),
    ("nul-in-key", {"key": "order\x001"}, InvalidEvent),
    ("nul-in-event-type", {"event_type": "Order\x00Placed"}, InvalidEvent),
    ("nul-in-tenant", {"tenant": "acme\x00"}, InvalidEvent),
    ("nul-in-header", {"headers": {"n": "v\x00"}}, InvalidHeader),
    ("empty-tenant", {"tenant": ""}, InvalidEvent),
    ("blank-tenant", {"tenant": "  "}, InvalidEvent),
    ("long-tenant", {"tenant": "t" * 256}, InvalidEvent),
    ("tenant-not-str", {"tenant": 7}, InvalidEvent),
]
