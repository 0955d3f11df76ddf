"""An event's CloudEvents attributes (subject, dataschema, extensions): stored in the row's
headers as ce_<attribute>, every rule broken once refused when the Event is built (so
before any SQL, by emit and RecordingOutbox alike), and ce_ user headers refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from producer_lib import Event, InvalidEvent, Outbox, RecordingOutbox
from producer_lib.errors import ReservedHeader

BASE: dict[str, Any] = {"topic": "orders", "key": "o-1", "event_type": "Created", "payload": {}}


def stored(**attributes: Any) -> dict[str, str]:
    row = Outbox(shard_count=1).prepare(Event(**BASE, **attributes))
    assert json.loads(row.headers_json) == row.headers
    return row.headers


def test_the_attributes_are_stored_as_ce_headers() -> None:
    headers = stored(
        subject="order/1",
        dataschema="https://example.com/schemas/created.json",
        extensions={"region": "eu1", "tier2": ""},
        headers={"x-user": "u"},
    )
    assert headers == {
        "content-type": "application/json",
        "ce_region": "eu1",
        "ce_tier2": "",
        "ce_subject": "order/1",
        "ce_dataschema": "https://example.com/schemas/created.json",
        "x-user": "u",
    }


def test_without_attributes_the_headers_are_as_before() -> None:
    assert stored() == {"content-type": "application/json"}
    assert stored(extensions={}) == {"content-type": "application/json"}


@pytest.mark.parametrize(
    "uri",
    ["urn:isbn:0451450523", "https://example.com/s.json", "a:b", "x+y.z-1:/p?q#f"],
)
def test_absolute_uris_are_dataschemas(uri: str) -> None:
    assert stored(dataschema=uri)["ce_dataschema"] == uri


HOSTILE: list[tuple[dict[str, Any], str, str]] = [
    ({"subject": ""}, "subject", "must not be empty"),
    ({"subject": "a\x00b"}, "subject", "NUL"),
    ({"subject": 7}, "subject", "must be a str, not int"),
    ({"subject": b"s"}, "subject", "must be a str, not bytes"),
    ({"subject": "s" * 8193}, "subject", "longer than 8192"),
    ({"dataschema": ""}, "dataschema", "absolute URI"),
    ({"dataschema": "/relative/path"}, "dataschema", "absolute URI"),
    ({"dataschema": "schema.json"}, "dataschema", "absolute URI"),
    ({"dataschema": "https:"}, "dataschema", "absolute URI"),
    ({"dataschema": "1http://x"}, "dataschema", "absolute URI"),
    ({"dataschema": "https://x/a b"}, "dataschema", "absolute URI"),
    ({"dataschema": "https://x/\tb"}, "dataschema", "absolute URI"),
    ({"dataschema": "https://x/\x00"}, "dataschema", "NUL"),
    ({"dataschema": 3}, "dataschema", "must be a str"),
    ({"extensions": ["region"]}, "extensions", "mapping of str to str"),
    ({"extensions": "region=eu"}, "extensions", "mapping of str to str"),
    ({"extensions": {"Region": "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"re-gion": "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"re_gion": "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"": "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"a" * 21: "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"région": "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {1: "eu"}}, "extensions", "lower-case letters and digits"),
    ({"extensions": {"id": "x"}}, "extensions", "attribute CloudEvents or the relay sets"),
    ({"extensions": {"source": "x"}}, "extensions", "attribute CloudEvents or the relay sets"),
    ({"extensions": {"partitionkey": "x"}}, "extensions", "attribute"),
    ({"extensions": {"traceparent": "x"}}, "extensions", "attribute"),
    ({"extensions": {"data": "x"}}, "extensions", "attribute"),
    ({"extensions": {"subject": "x"}}, "extensions", "attribute"),
    ({"extensions": {"region": 1}}, "extensions", "must be a str, not int"),
    ({"extensions": {"region": None}}, "extensions", "must be a str, not NoneType"),
    ({"extensions": {"region": "a\x00"}}, "extensions", "NUL"),
    ({"extensions": {"region": "r" * 8193}}, "extensions", "longer than 8192"),
]


@pytest.mark.parametrize(("attributes", "field", "message"), HOSTILE)
def test_a_hostile_attribute_is_refused_when_the_event_is_built(
    attributes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidEvent, match=message) as info:
        Event(**BASE, **attributes)
    assert info.value.field == field
    outbox = RecordingOutbox()
    with pytest.raises(InvalidEvent, match=message):
        outbox.emit(None, **BASE, **attributes)
    assert outbox.events == []


@pytest.mark.parametrize("name", ["ce_subject", "CE_id", "Ce_region", "ce_"])
def test_a_ce_user_header_is_refused(name: str) -> None:
    with pytest.raises(ReservedHeader, match="ce_") as info:
        Outbox(shard_count=1).prepare(Event(**BASE, headers={name: "x"}))
    assert info.value.name == name


def test_the_attributes_are_part_of_the_body_an_idempotency_key_promises() -> None:
    outbox = Outbox(shard_count=1)
    first = outbox.prepare(Event(**BASE, idempotency_key="k", subject="a"))
    second = outbox.prepare(Event(**BASE, idempotency_key="k", subject="b"))
    plain = outbox.prepare(Event(**BASE, idempotency_key="k"))
    assert len({first.body_hash, second.body_hash, plain.body_hash}) == 3
