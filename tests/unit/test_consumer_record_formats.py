"""Decoding every record shape into the event a handler sees: the relay's native record,
CloudEvents binary and structured mode (built with the cloudevents SDK's Kafka binding,
as a foreign producer would, and by hand), and Debezium's EventRouter; which shape wins
when a record claims several; the event ids of ids that are not UUIDs; and hostile
records, each a PoisonRecord with its reason."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any, cast

import pytest
from cloudevents.core.bindings import kafka as ce_kafka
from sqlalchemy import create_engine

from consumer_lib import EVENT_ID_NAMESPACE, ConsumerApp, ConsumerSettings, KafkaSecurity
from consumer_lib.apply import ApplyPolicy, Prepared, Settle
from consumer_lib.database import SqlAlchemySync
from consumer_lib.errors import PoisonReason, PoisonRecord
from consumer_lib.event import ConsumedEvent, decode
from consumer_lib.record_formats import CloudEventAttributes, DebeziumHeaders
from tests.support.consumers import cloud_event

EVENT_ID = "3f0c6a52-7d1e-4c8b-9a51-2b7c0d9e8f10"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass(frozen=True)
class Rec:
    """A Kafka record as aiokafka hands it over (SourceRecord)."""

    value: bytes | None
    headers: list[tuple[str, bytes]]
    key: bytes | None = b"order-1"
    topic: str = "orders"
    partition: int = 0
    offset: int = 7
    timestamp: int = 1_700_000_000_000


def from_sdk(message: ce_kafka.KafkaMessage) -> Rec:
    key = message.key.encode() if isinstance(message.key, str) else message.key
    return Rec(message.value, list(message.headers.items()), key)


def native(value: bytes, **extra: bytes) -> Rec:
    return Rec(
        value,
        [
            ("event_id", EVENT_ID.encode()),
            ("event_type", b"OrderPlaced"),
            ("content-type", b"application/json"),
            *extra.items(),
        ],
    )


def structured(envelope: Any, *headers: tuple[str, bytes]) -> Rec:
    value = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
    return Rec(value, [("content-type", b"application/cloudevents+json"), *headers])


def envelope(**over: Any) -> dict[str, Any]:
    found = {
        "specversion": "1.0",
        "id": EVENT_ID,
        "source": "/orders-service",
        "type": "OrderPlaced",
        "datacontenttype": "application/json",
        "data": {"n": 1},
    }
    found.update(over)
    return {k: v for k, v in found.items() if v is not _DROP}


_DROP = object()


def binary(*headers: tuple[str, bytes], value: bytes = b'{"n":1}') -> Rec:
    return Rec(value, list(headers))


CE_HEADERS = (
    ("ce_specversion", b"1.0"),
    ("ce_id", EVENT_ID.encode()),
    ("ce_source", b"/orders-service"),
    ("ce_type", b"OrderPlaced"),
    ("content-type", b"application/json"),
)


def debezium_record(event_id: bytes = EVENT_ID.encode(), **extra: bytes) -> Rec:
    return Rec(b'{"n":1}', [("id", event_id), ("eventType", b"OrderPlaced"), *extra.items()])


def poison(record: Rec, **kwargs: Any) -> PoisonRecord:
    with pytest.raises(PoisonRecord) as caught:
        decode(record, **kwargs)
    return caught.value


# --------------------------------------------------------------------------- each shape


def test_a_native_record_decodes_as_before_without_cloudevent() -> None:
    event = decode(native(b'{"n":1}', traceparent=TRACEPARENT.encode()))
    assert event.event_id == uuid.UUID(EVENT_ID)
    assert (event.key, event.event_type, event.payload) == ("order-1", "OrderPlaced", {"n": 1})
    assert event.headers["traceparent"] == TRACEPARENT
    assert event.cloudevent is None


def test_a_binary_cloudevent_of_the_sdk() -> None:
    sent = cloud_event(
        EVENT_ID,
        {"n": 1},
        datacontenttype="application/json",
        subject="order-1",
        dataschema="https://example.com/schemas/order.json",
        partitionkey="order-1",
        tenant="acme",
        traceparent=TRACEPARENT,
    )
    event = decode(from_sdk(ce_kafka.to_binary_event(sent)))
    assert event.event_id == uuid.UUID(EVENT_ID)
    assert (event.key, event.event_type, event.payload) == ("order-1", "OrderPlaced", {"n": 1})
    assert event.cloudevent == CloudEventAttributes(
        id=EVENT_ID,
        source="/orders-service",
        type="OrderPlaced",
        specversion="1.0",
        time="2026-12-05T09:00:00.123456Z",
        subject="order-1",
        dataschema="https://example.com/schemas/order.json",
        datacontenttype="application/json",
        extensions={"tenant": "acme"},
    )
    assert event.headers["content-type"] == "application/json"


def test_a_binary_cloudevent_with_bytes_keeps_them() -> None:
    sent = cloud_event(EVENT_ID, b"\x00\xffraw", datacontenttype="application/octet-stream")
    event = decode(from_sdk(ce_kafka.to_binary_event(sent)))
    assert event.payload == b"\x00\xffraw"
    assert event.key is None  # no partitionkey: no key
    assert event.cloudevent is not None
    assert event.cloudevent.extensions == {}


@pytest.mark.parametrize(
    ("data", "content_type", "payload"),
    [
        ({"n": 1}, "application/json", {"n": 1}),
        ([1, "two"], "application/vnd.orders+json; charset=utf-8", [1, "two"]),
        (b"\x00\x01bytes", "application/octet-stream", b"\x00\x01bytes"),
    ],
    ids=["json", "plus-json", "bytes"],
)
def test_a_structured_cloudevent_of_the_sdk(data: Any, content_type: str, payload: Any) -> None:
    sent = cloud_event(
        EVENT_ID, data, datacontenttype=content_type, partitionkey="order-9", ext1="v"
    )
    event = decode(from_sdk(ce_kafka.to_structured_event(sent)))
    assert event.event_id == uuid.UUID(EVENT_ID)
    assert (event.key, event.event_type, event.payload) == ("order-9", "OrderPlaced", payload)
    assert event.headers["content-type"] == content_type  # the payload's, as a native record's
    assert event.cloudevent is not None
    assert event.cloudevent.datacontenttype == content_type
    assert event.cloudevent.extensions == {"ext1": "v"}


def test_a_structured_cloudevent_as_the_relay_writes_it() -> None:
    """data embedded as JSON text; trace context in the envelope; other headers kept."""
    value = (
        b'{"specversion":"1.0","id":"' + EVENT_ID.encode() + b'","source":"/orders-service",'
        b'"type":"OrderPlaced","time":"2026-12-05T09:00:00.123456Z","partitionkey":"order-1",'
        b'"datacontenttype":"application/json","subject":"s","retries":3,"flag":true,'
        b'"traceparent":"' + TRACEPARENT.encode() + b'","data":{"n":1}}'
    )
    record = Rec(
        value,
        [("content-type", b"application/cloudevents+json; charset=utf-8"), ("tenant", b"acme")],
        key=None,
    )
    event = decode(record)
    assert (event.key, event.payload) == ("order-1", {"n": 1})  # no key: the partitionkey
    assert event.headers == {
        "tenant": "acme",
        "content-type": "application/json",
        "traceparent": TRACEPARENT,
    }
    assert event.cloudevent is not None
    assert event.cloudevent.extensions == {"retries": "3", "flag": "true"}
    assert event.cloudevent.subject == "s"
    assert event.raw == value


def test_structured_data_base64_of_json_content_is_decoded_and_text_data_is_bytes() -> None:
    encoded = base64.b64encode(b'{"n":2}').decode()
    assert decode(structured(envelope(data=_DROP, data_base64=encoded))).payload == {"n": 2}
    text = envelope(data="plain words", datacontenttype="text/plain")
    assert decode(structured(text)).payload == b"plain words"
    assert decode(structured(envelope(data=_DROP))).payload is None


def test_a_debezium_record_with_the_default_and_configured_headers() -> None:
    event = decode(debezium_record(**{"content-type": b"application/json"}))
    assert (event.event_id, event.event_type, event.payload) == (
        uuid.UUID(EVENT_ID),
        "OrderPlaced",
        {"n": 1},
    )
    assert event.cloudevent is None
    assert decode(debezium_record()).payload == b'{"n":1}'  # no content type: bytes
    custom = Rec(b"{}", [("eventId", b"42"), ("kind", b"Shipped")])
    event = decode(custom, DebeziumHeaders(id="eventId", type="kind"))
    assert (event.event_id, event.event_type) == (uuid.uuid5(EVENT_ID_NAMESPACE, "42"), "Shipped")
    assert decode(custom).event_id is None  # another id header: not a Debezium record


def test_the_apply_policy_reads_debezium_records_by_the_settings_headers() -> None:
    settings = ConsumerSettings(
        bootstrap_servers="k:9092",
        group_id="g",
        security=KafkaSecurity.plaintext(),
        debezium_id_header="eventId",
        debezium_type_header="kind",
    )
    app = ConsumerApp(settings, SqlAlchemySync(create_engine("sqlite://")))

    @app.handler("orders", "Shipped")
    def on_shipped(event: ConsumedEvent, session: Any) -> None:
        return None

    policy = ApplyPolicy(
        app,
        supervisor=cast(Any, None),
        observer=cast(Any, None),
        dead_letters=cast(Any, None),
        offsets=cast(Any, None),
    )
    found = policy.examine(Rec(b"{}", [("eventId", b"42"), ("kind", b"Shipped")]))
    assert isinstance(found, Prepared)
    assert found.event.event_id == uuid.uuid5(EVENT_ID_NAMESPACE, "42")
    empty = policy.examine(Rec(b"{}", [("eventId", b""), ("kind", b"Shipped")]))
    assert isinstance(empty, Settle)
    assert empty.error is not None
    assert empty.error.reason is PoisonReason.INVALID_EVENT_ID


# --------------------------------------------------------------------------- precedence


def test_event_id_wins_over_every_other_shape() -> None:
    record = Rec(
        b'{"n":1}',
        [
            ("event_id", EVENT_ID.encode()),
            ("event_type", b"Native"),
            ("ce_id", b"other"),
            ("ce_specversion", b"1.0"),
            ("id", b"debezium"),
            ("content-type", b"application/json"),
        ],
    )
    event = decode(record)
    assert (event.event_id, event.event_type, event.cloudevent) == (
        uuid.UUID(EVENT_ID),
        "Native",
        None,
    )


def test_binary_wins_over_structured_and_structured_over_debezium() -> None:
    both = binary(*CE_HEADERS[:4], ("content-type", b"application/cloudevents+json"))
    event = decode(both)  # binary: the value is the data, not an envelope
    assert (event.payload, event.event_id) == ({"n": 1}, uuid.UUID(EVENT_ID))
    assert event.cloudevent is not None
    assert event.cloudevent.datacontenttype == "application/cloudevents+json"
    with_id = structured(envelope(id="ce-1"), ("id", b"debezium-1"), ("eventType", b"Other"))
    event = decode(with_id)
    assert event.event_type == "OrderPlaced"
    assert event.event_id == uuid.uuid5(EVENT_ID_NAMESPACE, "/orders-service\x00ce-1")


# --------------------------------------------------------------------------- event ids


def test_a_cloudevent_id_that_is_no_uuid_is_named_with_its_source() -> None:
    def event_id(source: str, id_: str) -> uuid.UUID | None:
        return decode(structured(envelope(id=id_, source=source))).event_id

    first = event_id("/billing", "order-1")
    assert first == uuid.uuid5(EVENT_ID_NAMESPACE, "/billing\x00order-1")
    assert event_id("/billing", "order-1") == first  # the same event: the same id, deduped
    assert event_id("/shipping", "order-1") != first  # ids are unique per source only
    assert event_id("/billing", "order-2") != first
    # Binary mode names it the same way: one event, whichever mode carried it.
    headers = dict(CE_HEADERS) | {"ce_id": b"order-1", "ce_source": b"/billing"}
    assert decode(binary(*headers.items())).event_id == first


def test_only_a_canonical_uuid_is_taken_as_is() -> None:
    assert decode(structured(envelope(id=EVENT_ID.upper()))).event_id == uuid.UUID(EVENT_ID)
    braced = "{" + EVENT_ID + "}"  # uuid.UUID() takes it; two spellings must not share an id
    assert decode(structured(envelope(id=braced))).event_id == uuid.uuid5(
        EVENT_ID_NAMESPACE, "/orders-service\x00" + braced
    )
    assert decode(debezium_record(b"order-1")).event_id == uuid.uuid5(EVENT_ID_NAMESPACE, "order-1")


def test_the_namespace_is_fixed() -> None:
    """Changing it would give every foreign event already applied a new event_id."""
    assert str(EVENT_ID_NAMESPACE) == "6f1b2c1e-7a53-5b8e-9d0c-3e2f4a5b6c7d"


# --------------------------------------------------------------------------- hostile records


def _nested(depth: int) -> bytes:
    return b'{"specversion":"1.0","x":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (structured(b"not json"), PoisonReason.INVALID_ENVELOPE),
        (structured(b"\xff\xfe"), PoisonReason.INVALID_ENVELOPE),
        (
            Rec(None, [("content-type", b"application/cloudevents+json")]),
            PoisonReason.INVALID_ENVELOPE,
        ),
        (structured([envelope()]), PoisonReason.INVALID_ENVELOPE),
        (structured("a string"), PoisonReason.INVALID_ENVELOPE),
        (structured(None), PoisonReason.INVALID_ENVELOPE),
        (structured(envelope(id=_DROP)), PoisonReason.MISSING_ATTRIBUTE),
        (structured(envelope(id=None)), PoisonReason.MISSING_ATTRIBUTE),
        (structured(envelope(source=_DROP)), PoisonReason.MISSING_ATTRIBUTE),
        (structured(envelope(specversion=_DROP)), PoisonReason.MISSING_ATTRIBUTE),
        (structured(envelope(type=_DROP)), PoisonReason.MISSING_ATTRIBUTE),
        (structured(envelope(id=42)), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(id=["x"])), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(id="")), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(type={"a": 1})), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(source="/a\x00b")), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(subject=5)), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(myext={"nested": True})), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(myext=1.5)), PoisonReason.INVALID_ATTRIBUTE),
        (structured(envelope(data=_DROP, data_base64="%%%")), PoisonReason.INVALID_PAYLOAD),
        (structured(envelope(data=_DROP, data_base64="QUJD=")), PoisonReason.INVALID_PAYLOAD),
        (structured(envelope(data=_DROP, data_base64=12)), PoisonReason.INVALID_PAYLOAD),
        (
            structured(envelope(data_base64=base64.b64encode(b"{}").decode())),
            PoisonReason.INVALID_ENVELOPE,
        ),
        (
            structured(envelope(data=_DROP, data_base64=base64.b64encode(b"{bad").decode())),
            PoisonReason.INVALID_PAYLOAD,
        ),
        (structured(_nested(200_000)), PoisonReason.UNDECODABLE),
        (
            binary(*[h for h in CE_HEADERS if h[0] != "ce_specversion"]),
            PoisonReason.MISSING_ATTRIBUTE,
        ),
        (binary(*[h for h in CE_HEADERS if h[0] != "ce_source"]), PoisonReason.MISSING_ATTRIBUTE),
        (binary(*CE_HEADERS[:1], ("ce_id", b""), *CE_HEADERS[2:]), PoisonReason.INVALID_ATTRIBUTE),
        (binary(*CE_HEADERS, ("ce_type", b"Other")), PoisonReason.CONFLICTING_HEADERS),
        (binary(*CE_HEADERS[:3], ("ce_type", b"\xff\xfe")), PoisonReason.NOT_UTF8),
        (binary(*CE_HEADERS, value=b"{not json"), PoisonReason.INVALID_PAYLOAD),
        (debezium_record(b""), PoisonReason.INVALID_EVENT_ID),
        (debezium_record(b"\xc3"), PoisonReason.NOT_UTF8),
        (debezium_record(**{"id": b"other"}), PoisonReason.CONFLICTING_HEADERS),
        (native(b"{}", event_id=b"not-a-uuid"), PoisonReason.CONFLICTING_HEADERS),
    ],
    ids=[
        "structured-not-json",
        "structured-not-utf8",
        "structured-no-value",
        "structured-array",
        "structured-string",
        "structured-null",
        "id-missing",
        "id-null",
        "source-missing",
        "specversion-missing",
        "type-missing",
        "id-number",
        "id-array",
        "id-empty",
        "type-object",
        "source-with-nul",
        "subject-number",
        "extension-object",
        "extension-float",
        "data-base64-not-base64",
        "data-base64-bad-padding",
        "data-base64-number",
        "data-and-data-base64",
        "data-base64-json-invalid",
        "structured-nested-too-deep",
        "binary-without-specversion",
        "binary-without-source",
        "binary-id-empty",
        "binary-type-twice",
        "binary-type-not-utf8",
        "binary-json-invalid",
        "debezium-id-empty",
        "debezium-id-not-utf8",
        "debezium-id-twice",
        "native-event-id-twice",
    ],
)
def test_a_malformed_record_is_a_poison_record_with_its_reason(
    record: Rec, reason: PoisonReason
) -> None:
    assert poison(record).reason is reason


def test_huge_and_odd_header_values_decode_without_harm() -> None:
    """Ids of any length and characters name an event (they end up a UUID); only bytes
    that are not UTF-8 are refused (above)."""
    huge = "x" * 1_000_000
    headers = dict(CE_HEADERS) | {"ce_id": huge.encode(), "ce_subject": b"\x1b]0;owned\x07"}
    event = decode(binary(*headers.items()))
    assert event.event_id == uuid.uuid5(EVENT_ID_NAMESPACE, "/orders-service\x00" + huge)
    assert event.cloudevent is not None
    assert event.cloudevent.subject == "\x1b]0;owned\x07"
    odd = decode(debezium_record("\u202e\x00 id".encode()))
    assert odd.event_id == uuid.uuid5(EVENT_ID_NAMESPACE, "\u202e\x00 id")
