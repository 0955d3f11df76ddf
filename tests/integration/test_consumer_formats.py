"""Every record shape consumer_lib recognises, on real Kafka and Postgres.

One topic carries the relay's native record, CloudEvents in binary and structured mode
(made with the cloudevents SDK's Kafka binding, as another producer would) and Debezium's
outbox EventRouter record, each event twice, with a malformed structured envelope among
them: every event is applied exactly once, the malformed record is dead-lettered, the
records after it are applied, and handlers see the CloudEvents attributes. Then the relay
writes emitted events in each of its record formats, one topic each, and the consumer
applies them the same way."""

from __future__ import annotations

import uuid

import pytest
from cloudevents.core.bindings import kafka as ce_kafka
from pydantic import BaseModel

from consumer_lib import EVENT_ID_NAMESPACE, ConsumedEvent, ConsumerApp
from producer_lib import Outbox
from tests.conftest import TopicFactory
from tests.support.consumers import (
    CE_SOURCE,
    Outgoing,
    cloud_event,
    dead_letters,
    effect_handler,
    effect_problems,
    effects,
    fast_settings,
    header,
    make_database,
    new_group,
    produce,
    relay_record,
    running_consumer,
    wait_committed,
)
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx

pytestmark = pytest.mark.integration


def sdk_record(message: ce_kafka.KafkaMessage, event_id: str) -> Outgoing:
    key = message.key.decode() if isinstance(message.key, bytes) else message.key
    return Outgoing(key, message.value, tuple(message.headers.items()), event_id=event_id)


async def test_a_topic_mixing_every_shape_is_applied_exactly_once(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    topic = await topics("formats")
    native_id, binary_id, debezium_id, bytes_id = (str(uuid.uuid4()) for _ in range(4))
    foreign_id = f"order-3-{uuid.uuid4().hex[:8]}"  # another producer's id: no UUID
    structured_id = str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{CE_SOURCE}\x00{foreign_id}"))

    native = relay_record(native_id, "order-1", {"n": 1})
    binary = sdk_record(
        ce_kafka.to_binary_event(
            cloud_event(
                binary_id,
                {"n": 2},
                datacontenttype="application/json",
                partitionkey="order-2",
                subject="order-2",
                dataschema="https://example.com/schemas/order.json",
                tenant="acme",
            )
        ),
        binary_id,
    )
    structured = sdk_record(
        ce_kafka.to_structured_event(
            cloud_event(
                foreign_id, {"n": 3}, datacontenttype="application/json", partitionkey="order-3"
            )
        ),
        structured_id,
    )
    malformed = Outgoing(
        "order-bad",
        b'{"specversion":"1.0","id":42,"source":"/x","type":"OrderPlaced"}',
        (("content-type", b"application/cloudevents+json"),),
    )
    debezium = Outgoing(
        "order-4",
        b'{"n":4}',
        (("id", debezium_id.encode()), ("eventType", b"OrderPlaced")),
        event_id=debezium_id,
    )
    blob = sdk_record(
        ce_kafka.to_structured_event(
            cloud_event(
                bytes_id,
                b"\x00\x01blob",
                datacontenttype="application/octet-stream",
                partitionkey="order-5",
            )
        ),
        bytes_id,
    )
    fresh = [native, binary, structured, malformed, debezium, blob]
    layout = await produce(kafka_bootstrap, topic, [*fresh, *fresh])

    group = new_group()
    calls: list[ConsumedEvent] = []
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database("psycopg_async", pg))
    app.handler(topic, "OrderPlaced")(
        effect_handler("psycopg_async", "postgres", group, calls=calls)
    )
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)

    expected = {native_id, binary_id, structured_id, debezium_id, bytes_id}
    assert effect_problems(effects(pg), expected, group) == []

    dead = await dead_letters(kafka_bootstrap, topic)
    assert sorted((d.key or b"").decode() for d in dead) == ["order-bad", "order-bad"]
    assert {header(d, "dlt.original.offset") for d in dead} == {"3", "9"}
    assert all("CloudEvent's 'id' is a int" in header(d, "dlt.error") for d in dead)

    seen = {str(event.event_id): event for event in calls}
    assert set(seen) == expected
    assert seen[native_id].cloudevent is None
    assert seen[debezium_id].cloudevent is None
    assert (seen[debezium_id].key, seen[debezium_id].payload) == ("order-4", b'{"n":4}')
    assert seen[bytes_id].payload == b"\x00\x01blob"
    for event_id, key, n in ((binary_id, "order-2", 2), (structured_id, "order-3", 3)):
        event = seen[event_id]
        assert (event.key, event.event_type, event.payload) == (key, "OrderPlaced", {"n": n})
        assert event.headers["content-type"] == "application/json"
        attributes = event.cloudevent
        assert attributes is not None
        assert (attributes.source, attributes.type, attributes.specversion) == (
            CE_SOURCE,
            "OrderPlaced",
            "1.0",
        )
        assert attributes.time == "2026-12-05T09:00:00.123456Z"
    binary_attributes = seen[binary_id].cloudevent
    assert binary_attributes is not None
    assert binary_attributes.subject == "order-2"
    assert binary_attributes.dataschema == "https://example.com/schemas/order.json"
    assert binary_attributes.extensions == {"tenant": "acme"}
    structured_attributes = seen[structured_id].cloudevent
    assert structured_attributes is not None
    assert structured_attributes.id == foreign_id


# --------------------------------------------------------------------------- from the relay


class Shipment(BaseModel):
    order: str
    parcels: int


PAYLOADS: dict[str, tuple[object, object]] = {
    # what is emitted -> what the handler gets
    "json": ({"n": 1, "note": "ünïcode"}, {"n": 1, "note": "ünïcode"}),
    "bytes": (b"\x00\x01\xffblob", b"\x00\x01\xffblob"),
    "model": (Shipment(order="o-1", parcels=2), {"order": "o-1", "parcels": 2}),
}
FORMATS = ("native", "cloudevents-binary", "cloudevents-structured", "debezium")


async def test_the_relays_records_in_every_format_are_applied_exactly_once(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """The relay writes each topic in its own format (OUTBOX_RECORD_FORMATS); every record
    then reaches Kafka a second time (a relay publishing a row twice around a crash). The
    consumer applies each emitted event once, under the event_id emit returned, with the
    payload as emitted and, in the CloudEvents formats, the attributes emit was given."""
    by_format = {fmt: await topics(f"rf-{fmt.split('-')[-1]}") for fmt in FORMATS}
    emitted: dict[str, tuple[str, str]] = {}  # event_id -> (format, payload kind)
    with sync_tx(pg, "driver") as conn:
        for fmt, topic in by_format.items():
            for kind, (payload, _) in PAYLOADS.items():
                new_id = Outbox().emit(
                    conn,
                    topic=topic,
                    key=f"order-{kind}",
                    event_type="OrderPlaced",
                    payload=payload,
                    headers={"x-tenant": "acme"},
                    subject=f"order-{kind}",
                    dataschema="https://example.com/schemas/order.json",
                    extensions={"region": "eu1"},
                )
                emitted[str(new_id)] = (fmt, kind)
    settings = relay_settings(
        pg,
        kafka_bootstrap,
        record_formats={topic: fmt for fmt, topic in by_format.items() if fmt != "native"},
        cloudevents_source=CE_SOURCE,
    )
    async with running_relay(settings):
        await wait_drained(pg)

    layouts = []
    for topic in by_format.values():
        published = await read_topic(kafka_bootstrap, topic)
        assert len(published) == len(PAYLOADS)
        again = [
            Outgoing(None if r.key is None else r.key.decode(), r.value, r.headers)
            for r in published
        ]
        layouts.append(await produce(kafka_bootstrap, topic, again))

    group = new_group()
    calls: list[ConsumedEvent] = []
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database("psycopg_async", pg))
    for topic in by_format.values():
        app.handler(topic, "OrderPlaced")(
            effect_handler("psycopg_async", "postgres", group, calls=calls)
        )
    async with running_consumer(app) as running:
        for layout in layouts:
            await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)

    assert effect_problems(effects(pg), emitted, group) == []
    seen = {str(event.event_id): event for event in calls}
    assert set(seen) == set(emitted)
    for event_id, (fmt, kind) in emitted.items():
        event = seen[event_id]
        where = f"{fmt}, {kind}"
        assert (event.key, event.event_type) == (f"order-{kind}", "OrderPlaced"), where
        assert event.payload == PAYLOADS[kind][1], where
        assert event.headers.get("x-tenant") == "acme", where
        if not fmt.startswith("cloudevents"):
            assert event.cloudevent is None, where
            continue
        attributes = event.cloudevent
        assert attributes is not None, where
        assert (attributes.id, attributes.source, attributes.type) == (
            event_id,
            CE_SOURCE,
            "OrderPlaced",
        ), where
        assert attributes.subject == f"order-{kind}", where
        assert attributes.dataschema == "https://example.com/schemas/order.json", where
        assert attributes.extensions == {"region": "eu1"}, where
        assert attributes.time is not None, where
        content_type = "application/octet-stream" if kind == "bytes" else "application/json"
        assert attributes.datacontenttype == content_type, where
