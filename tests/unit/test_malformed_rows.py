"""Rows that cannot become records (relay/transport/records.py) are reported, never
raised, and KeyOrder (relay/pipeline/ordering.py) refuses them as MalformedRow: every other
row of the claim goes out, and under block_key the malformed row's key waits behind it."""

from __future__ import annotations

from typing import Any

import pytest

from relay.pipeline.ordering import KeyOrder
from relay.store import ClaimedRow, Policy
from relay.transport.errors import FailureReason
from relay.transport.records import to_records

TOPICS = {"t": "kafka.t"}


def row(i: int, key: Any = "k", headers: Any = "{}", **over: Any) -> ClaimedRow:
    fields: dict[str, Any] = {
        "id": i,
        "shard": 0,
        "event_id": f"e{i}",
        "topic": "t",
        "key": key,
        "event_type": "T",
        "payload": b"{}",
        "headers_json": headers,
        "attempts": 0,
        "created_at": 0.0,
        "tenant": None,
    }
    fields.update(over)
    return ClaimedRow(**fields)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (row(2, headers="[1, 2]"), "headers are an array, not a JSON object"),
        (row(2, headers='"text"'), "headers are a string, not a JSON object"),
        (row(2, headers="null"), "headers are null, not a JSON object"),
        (row(2, headers="42"), "headers are a number, not a JSON object"),
        (row(2, headers="{not json"), "headers are not JSON"),
        (row(2, headers='{"n": 3}'), "header 'n' is a number, not a string"),
        (row(2, headers='{"n": {"deep": "x"}}'), "header 'n' is an object, not a string"),
        (row(2, headers='{"n": null}'), "header 'n' is null, not a string"),
        (row(2, headers='{"n": "\\ud800"}'), "not valid Unicode"),
        (row(2, headers="[" * 100_000), "headers are not JSON"),
        (row(2, headers=b"[1]"), "its headers is a bytes, not str"),
        (row(2, key=17), "its key is a int, not str"),
        (row(2, key=b"k"), "its key is a bytes, not str"),
        (row(2, payload="text"), "its payload is a str, not bytes"),
        (row(2, payload=None), "its payload is a NoneType, not bytes"),
        (row(2, event_id=None), "its event_id is a NoneType, not str"),
        (row(2, event_type=5), "its event_type is a int, not str"),
        (row(2, topic="unmapped"), "its topic has no Kafka topic"),
    ],
)
def test_a_row_that_cannot_become_a_record_is_reported_and_the_others_are_built(
    bad: ClaimedRow, why: str
) -> None:
    rows = [row(1), bad, row(3, key="other", headers='{"x-user": "u"}')]
    records, oversized, malformed = to_records(rows, TOPICS, 1_000_000)
    assert list(malformed) == [1]
    assert malformed[1].startswith("malformed row: ")
    assert why in malformed[1]
    assert oversized == {}
    assert len(records) == 3  # a malformed row keeps its place: indexes stay the rows'
    assert records[0].topic == records[2].topic == "kafka.t"
    assert dict(records[2].headers)["x-user"] == b"u"


def test_a_claim_of_only_good_rows_reports_nothing_malformed() -> None:
    rows = [row(i, key=f"k{i % 3}", headers='{"a": "b"}') for i in range(1, 200)]
    records, oversized, malformed = to_records(rows, TOPICS, 1_000_000)
    assert (len(records), oversized, malformed) == (199, {}, {})


def test_the_message_never_carries_the_whole_hostile_header_name() -> None:
    name = "n" * 10_000
    _, _, malformed = to_records([row(1, headers=f'{{"{name}": 1}}')], TOPICS, 1_000_000)
    assert len(malformed[0]) < 300


@pytest.mark.parametrize(("policy", "sent"), [("block_key", [3, 5]), ("skip", [3, 4, 5])])
def test_a_malformed_row_is_refused_and_under_block_key_holds_its_key(
    policy: Policy, sent: list[int]
) -> None:
    """Rows 1 (key a) is good, 2 (key a) malformed: 4 (key a) waits behind it under
    block_key, as behind any parked row; the other key flows."""
    rows = [row(1, "a"), row(2, "a", "[]"), row(3, "b"), row(4, "a"), row(5, "b")]
    records, oversized, malformed = to_records(rows, TOPICS, 1_000_000)
    plan = KeyOrder(policy).plan(rows, records, oversized, 1_000_000, malformed)
    assert [r.id for r in plan.sending] == [1, *sent]
    assert [r.event_id.encode() for r in plan.sending] == [
        dict(rec.headers)["event_id"] for rec in plan.records
    ]
    assert list(plan.errors) == [2]
    error = plan.errors[2]
    assert error.reason is FailureReason.MALFORMED_ROW
    assert not error.retriable  # parked at once: no retry can mend the row
    assert not error.transport  # charged to the row
    assert not error.fatal
    assert str(error) == "malformed row: headers are an array, not a JSON object"
    assert plan.held_back == (1 if policy == "block_key" else 0)
