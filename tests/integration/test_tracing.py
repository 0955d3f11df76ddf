"""Tracing across the outbox: the producer's span is the parent of the consumer's.

producer_lib captures the W3C trace context of the code that emits; the relay copies it
into the Kafka record's headers; consumer_lib extracts it and runs the handler in a
CONSUMER span whose parent is the producer's span. The OpenTelemetry SDK (test extra)
records the spans in memory.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind

from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings, PsycopgAsync
from outbox_core.kafka_security import KafkaSecurity
from producer_lib import Outbox
from tests.conftest import TopicFactory
from tests.support.consumers import running_consumer
from tests.support.db import postgres_backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration

_EXPORTER = InMemorySpanExporter()
_INSTALLED: list[TracerProvider] = []


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """Finished spans of this test. The global provider can be set once per process: the
    first test installs an SDK provider (or joins one already set) and later ones reuse it."""
    if not _INSTALLED:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _INSTALLED.append(provider)
    _EXPORTER.clear()
    return _EXPORTER


async def test_the_consumer_span_is_a_child_of_the_producer_span(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory, spans: InMemorySpanExporter
) -> None:
    backend = postgres_backend(pg_url)
    backend.migrate()
    topic = await new_topic("traced")
    outbox = Outbox()
    tracer = trace.get_tracer("tests.tracing")
    with (
        tracer.start_as_current_span("place order") as producer_span,
        sync_tx(backend, "driver") as conn,
    ):
        traced = outbox.emit(
            conn, topic=topic, key="k-1", event_type="OrderPlaced", payload={"n": 1}
        )
    with sync_tx(backend, "driver") as conn:  # outside any span: no context to carry
        untraced = outbox.emit(
            conn, topic=topic, key="k-2", event_type="OrderPlaced", payload={"n": 2}
        )
    parent = producer_span.get_span_context()

    async with running_relay(relay_settings(backend, kafka_bootstrap, http_port=0)):
        await wait_drained(backend)
    headers = {
        (r.header("event_id") or b"").decode(): dict(r.headers)
        for r in await read_topic(kafka_bootstrap, topic)
    }
    assert headers[str(traced)]["traceparent"].decode() == (
        f"00-{parent.trace_id:032x}-{parent.span_id:016x}-{int(parent.trace_flags):02x}"
    )
    assert "traceparent" not in headers[str(untraced)]

    group = f"g-{uuid.uuid4().hex[:8]}"
    current: dict[str, SpanContext] = {}

    async def handler(event: ConsumedEvent, conn: Any) -> None:
        current[str(event.event_id)] = trace.get_current_span().get_span_context()

    app = ConsumerApp(
        ConsumerSettings(
            security=KafkaSecurity.plaintext(),
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            create_dead_letter_topics=False,
        ),
        PsycopgAsync(backend.target),
    )
    app.handler(topic)(handler)
    async with running_consumer(app) as running:

        async def both() -> bool:
            return len(current) == 2

        await until(both, 60, "both events handled", alive=running.check_alive)

    finished = {
        s.attributes["messaging.message.id"]: s
        for s in spans.get_finished_spans()
        if s.name == f"{topic} process" and s.attributes is not None
    }
    child = finished[str(traced)]
    assert child.kind == SpanKind.CONSUMER
    assert child.parent is not None
    assert child.parent.is_remote  # restored from the record, not the local stack
    assert (child.parent.trace_id, child.parent.span_id) == (parent.trace_id, parent.span_id)
    assert child.context is not None
    assert child.context.trace_id == parent.trace_id
    assert child.attributes is not None
    assert child.attributes["messaging.destination.name"] == topic
    assert child.attributes["messaging.consumer.group.name"] == group
    # The handler ran inside that span: its own spans would be the consumer span's children.
    assert current[str(traced)].span_id == child.context.span_id
    # Without a context in the record the consumer span is a root of its own trace.
    root = finished[str(untraced)]
    assert root.parent is None
    assert root.context is not None
    assert root.context.trace_id != parent.trace_id
