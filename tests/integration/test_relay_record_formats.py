"""The record formats on real Postgres and Kafka: events emitted through producer_lib, of
every payload kind it accepts, published by the relay in each format and read back as a
consumer would. CloudEvents records parse with the cloudevents SDK's Kafka binding into
the attributes and data that were emitted; Debezium records carry the key, value and
headers EventRouter writes; a malformed row is parked in every format while the others
go out."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.formats.json import JSONFormat
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pydantic import BaseModel

from outbox_core.sharding import shard_for
from producer_lib import Outbox
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import Record, read_topic
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import SHARD_COUNT
from tests.support.transactions import sync_tx

pytestmark = pytest.mark.integration

SOURCE = "/orders-service"


class Order(BaseModel):
    id: int
    total: float
    note: str


PAYLOADS: dict[str, Any] = {
    "json": {"n": 1, "text": 'é "quoted"', "items": [1, 2]},
    "bytes": b"\x00\xff raw bytes",
    "model": Order(id=7, total=1.5, note="ünï"),
}
ATTRIBUTES: dict[str, Any] = {
    "subject": "order/7",
    "dataschema": "https://example.com/schemas/order.json",
    "extensions": {"region": "eu1", "tier": "gold"},
}


def _tracer() -> trace.Tracer:
    """An SDK tracer, so that emit captures a trace context (the global provider can be
    set once per process: joined when a test set it before)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    return trace.get_tracer("tests.record_formats")


def _data(payload: Any) -> Any:
    """What a consumer's data is for a payload producer_lib serialized."""
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


def _by_event_id(records: list[Record], header: str) -> dict[str, Record]:
    return {(r.header(header) or b"").decode(): r for r in records}


def _emit_all(backend: Backend, topic: str) -> tuple[dict[str, tuple[str, Any]], str, str]:
    """Each payload kind with every attribute inside a span, and one event with none
    outside any: {event_id: (kind, payload)}, the traced traceparent, the bare event."""
    outbox = Outbox()
    emitted: dict[str, tuple[str, Any]] = {}
    with (
        _tracer().start_as_current_span("place order") as span,
        sync_tx(backend, "driver") as conn,
    ):
        for kind, payload in PAYLOADS.items():
            event_id = outbox.emit(
                conn,
                topic=topic,
                key=f"order-{kind}",
                event_type="OrderPlaced",
                payload=payload,
                **ATTRIBUTES,
            )
            emitted[str(event_id)] = (kind, payload)
    context = span.get_span_context()
    flags = int(context.trace_flags)
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    with sync_tx(backend, "driver") as conn:
        bare = str(outbox.emit(conn, topic=topic, key="bare", event_type="Bare", payload={}))
    return emitted, traceparent, bare


@pytest.mark.parametrize("mode", ["cloudevents-binary", "cloudevents-structured"])
async def test_cloudevents_records_parse_with_the_sdk_into_what_was_emitted(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, mode: str
) -> None:
    topic = await new_topic("ce")
    emitted, traceparent, bare = _emit_all(pg, topic)
    settings = relay_settings(pg, kafka_bootstrap, record_format=mode, cloudevents_source=SOURCE)
    async with running_relay(settings):
        await wait_drained(pg)
    created = dict(pg.fetch("outbox_created_at_utc"))
    records = await read_topic(kafka_bootstrap, topic)
    assert len(records) == len(emitted) + 1
    parse = ce_kafka.from_binary if mode == "cloudevents-binary" else ce_kafka.from_structured
    events = {}
    for record in records:
        message = ce_kafka.KafkaMessage(
            headers=dict(record.headers), key=record.key, value=record.value or b""
        )
        event = parse(message, JSONFormat())
        events[event.get_id()] = (event, record)
        assert {name for name, _ in record.headers}.isdisjoint({"event_id", "event_type"})

    for event_id, (kind, payload) in emitted.items():
        event, record = events[event_id]
        attributes = event.get_attributes()
        time = attributes.pop("time")
        assert time.isoformat().replace("+00:00", "Z") == created[event_id]
        assert attributes == {
            "specversion": "1.0",
            "id": event_id,
            "source": SOURCE,
            "type": "OrderPlaced",
            "partitionkey": f"order-{kind}",
            "datacontenttype": (
                "application/octet-stream" if kind == "bytes" else "application/json"
            ),
            "subject": "order/7",
            "dataschema": "https://example.com/schemas/order.json",
            "region": "eu1",
            "tier": "gold",
            "traceparent": traceparent,
        }, kind
        assert event.get_data() == _data(payload), kind
        assert record.key == f"order-{kind}".encode()
        assert record.header("traceparent") == traceparent.encode()  # OpenTelemetry's own
    event, _ = events[bare]
    assert set(event.get_attributes()) == {
        "specversion",
        "id",
        "source",
        "type",
        "time",
        "partitionkey",
        "datacontenttype",
    }
    assert event.get_data() == {}


async def test_debezium_records_carry_what_eventrouter_writes(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("dbz")
    emitted, _, bare = _emit_all(pg, topic)
    async with running_relay(relay_settings(pg, kafka_bootstrap, record_format="debezium")):
        await wait_drained(pg)
    stored = {str(r[1]): bytes(r[6]) for r in pg.fetch("outbox_rows_all")}
    records = _by_event_id(await read_topic(kafka_bootstrap, topic), "id")
    assert set(records) == {*emitted, bare}
    for event_id, (kind, payload) in emitted.items():
        record = records[event_id]
        assert record.key == f"order-{kind}".encode()
        assert record.value == stored[event_id]  # the payload's bytes as stored
        assert _data(payload) == (payload if kind == "bytes" else json.loads(stored[event_id]))
        assert record.header("eventType") == b"OrderPlaced"
        assert record.header("event_id") is None
        assert record.header("ce_subject") == b"order/7"  # the row's other headers stay
    assert records[bare].header("eventType") == b"Bare"


async def test_debezium_id_header_and_placements_are_the_settings(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("dbz")
    with sync_tx(pg, "driver") as conn:
        tenanted = str(
            Outbox().emit(conn, topic=topic, key="k", event_type="E", payload={}, tenant="acme")
        )
    settings = relay_settings(
        pg,
        kafka_bootstrap,
        record_format="debezium",
        debezium_id_header="eventId",
        debezium_placements="event_type:header:type,tenant:header,topic:header:aggregate",
    )
    async with running_relay(settings):
        await wait_drained(pg)
    [record] = await read_topic(kafka_bootstrap, topic)
    assert record.headers[:4] == (
        ("eventId", tenanted.encode()),
        ("type", b"E"),
        ("tenant", b"acme"),
        ("aggregate", topic.encode()),
    )


@pytest.mark.parametrize(
    "fmt", ["native", "cloudevents-binary", "cloudevents-structured", "debezium"]
)
async def test_a_malformed_row_is_parked_and_the_others_go_out_in_every_format(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fmt: str
) -> None:
    topic = await new_topic("bad")
    outbox = Outbox()
    with sync_tx(pg, "driver") as conn:
        before = [
            outbox.emit(conn, topic=topic, key=f"k{i}", event_type="E", payload={})
            for i in range(5)
        ]
    pg.execute("outbox_headers_check_drop")
    [(bad_id,)] = pg.fetch(
        "outbox_insert_hostile",
        {
            "topic": topic,
            "key": "bad",
            "shard": shard_for("bad", SHARD_COUNT),
            "payload": b"{}",
            "headers": "[1, 2]",
        },
    )
    with sync_tx(pg, "driver") as conn:
        after = [
            outbox.emit(conn, topic=topic, key=f"k{i}", event_type="E", payload={})
            for i in range(5)
        ]
    settings = relay_settings(pg, kafka_bootstrap, record_format=fmt, cloudevents_source=SOURCE)
    async with running_relay(settings):
        await wait_drained(pg, parked_ok=True)
    rows = {int(r[0]): r for r in pg.fetch("outbox_rows_all")}
    assert rows[bad_id][9] == "parked"
    assert "headers are an array, not a JSON object" in rows[bad_id][11]
    records = await read_topic(kafka_bootstrap, topic)
    assert len(records) == len(before) + len(after)
    good = {str(e) for e in (*before, *after)}
    if fmt == "cloudevents-structured":
        assert {json.loads(r.value or b"")["id"] for r in records} == good
    else:
        header = {"native": "event_id", "cloudevents-binary": "ce_id", "debezium": "id"}[fmt]
        assert set(_by_event_id(records, header)) == good
    assert all(uuid.UUID(e) for e in good)
