"""A JSON log line a consumer's handler writes names the trace of the code that emitted the
event: producer_lib stores the W3C traceparent in the row, the relay copies it into the
Kafka record, consumer_lib applies the event inside that trace (its CONSUMER span with an
OpenTelemetry SDK, outbox_core.logs.trace_scope without). Real Postgres and Kafka."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings, PsycopgAsync
from consumer_lib.tracing import tracing
from outbox_core import logs
from outbox_core.kafka_security import KafkaSecurity
from tests.conftest import TopicFactory
from tests.support.consumers import running_consumer
from tests.support.db import postgres_backend
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import emit, event
from tests.support.waits import until

pytestmark = pytest.mark.integration

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logs.JsonFormatter())
        self.docs: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.docs.append(json.loads(self.format(record)))


async def test_a_handlers_log_line_names_the_producers_trace(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    backend = postgres_backend(pg_url)
    backend.migrate()
    topic = await new_topic("logtrace")
    # The emitting code runs in a trace (as a web request would); no SDK needed for that.
    producer_span = SpanContext(
        TRACE_ID, 0x00F067AA0BA902B7, is_remote=False, trace_flags=TraceFlags(1)
    )
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(producer_span)))
    try:
        emit(backend, event("traced", topic=topic))
    finally:
        otel_context.detach(token)
    emit(backend, event("untraced", topic=topic))  # emitted outside any trace

    settings = relay_settings(backend, kafka_bootstrap)
    async with running_relay(settings):
        await wait_drained(backend)

    lines = _Lines()
    log = logging.getLogger("tests.log_trace_ids")
    log.addHandler(lines)
    log.propagate = False
    log.setLevel(logging.INFO)

    async def handler(event: ConsumedEvent, conn: Any) -> None:
        log.info("applied", extra={"key": event.key})

    app = ConsumerApp(
        ConsumerSettings(
            security=KafkaSecurity.plaintext(),
            bootstrap_servers=kafka_bootstrap,
            group_id=f"g-{topic}",
        ),
        PsycopgAsync(backend.target),
    )
    app.handler(topic)(handler)
    try:
        async with running_consumer(app):

            async def both() -> bool:
                return len(lines.docs) == 2

            await until(both, 60, "both events to be applied")
    finally:
        log.removeHandler(lines)

    by_key = {doc["key"]: doc for doc in lines.docs}
    assert by_key["traced"]["trace_id"] == f"{TRACE_ID:032x}"
    untraced = by_key["untraced"]
    if tracing():  # an SDK is set up (by another test): the consumer's span is a new root
        assert untraced["trace_id"] != f"{TRACE_ID:032x}"
    else:
        assert "trace_id" not in untraced
    assert by_key["traced"]["ts"].endswith("Z")
