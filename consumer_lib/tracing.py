"""Trace context across the outbox: the producer's span is the parent of the handler's.

producer_lib stores the W3C trace context (traceparent, tracestate) of the emitting code in
the event's headers; the relay copies them into the Kafka record's headers. Here, when
OpenTelemetry is installed (the `otel` extra) and an SDK set up, the context is extracted
from the record and each handler call for the event runs inside a CONSUMER span named
"<topic> process" whose parent is the producer's span. Without either this is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from consumer_lib.event import ConsumedEvent

try:
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is optional
    _propagate = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

TRACER_NAME = "consumer_lib"


def tracing() -> bool:
    """Whether an OpenTelemetry SDK is set up: without one every span is a no-op, and making
    it costs about as much per event as the consumer's own code
    (docs/decisions/0020-consumer-batch-apply.md)."""
    if _trace is None:
        return False
    return not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)


@contextlib.contextmanager
def process_span(event: ConsumedEvent, group: str) -> Iterator[Any]:
    """The span an attempt to apply `event` runs in (yields None without OpenTelemetry).

    The span is current inside the block, so the handler's own spans (and its database
    driver's, when instrumented) are its children; an exception raised in the block is
    recorded on it and marks it as an error.
    """
    if _trace is None or _propagate is None or not tracing():
        yield None
        return
    parent = _propagate.extract(event.headers)  # reads traceparent / tracestate (and baggage)
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": event.topic,
        "messaging.destination.partition.id": str(event.partition),
        "messaging.kafka.offset": event.offset,
        "messaging.consumer.group.name": group,
    }
    if event.event_id is not None:
        attributes["messaging.message.id"] = str(event.event_id)
    if event.key is not None:
        attributes["messaging.kafka.message.key"] = event.key
    if event.event_type is not None:
        attributes["outbox.event_type"] = event.event_type
    tracer = _trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"{event.topic} process",
        context=parent,
        kind=_trace.SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span
