"""Hostile input at the edges, without services: operator output escaping, NOTIFY
payloads, dead-letter failure reasons, decoding (topic names: test_kafka_names.py)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from aiokafka.errors import (
    InvalidTopicError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from consumer_lib.errors import DeadLetterFailure, PoisonRecord, dead_letter_failure
from consumer_lib.event import decode
from consumer_lib.redis_entries import entry_record
from relay.control.notify import _Payloads
from relay.ops.cli_admin import limit, printable, row_id


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain key", "plain key"),
        ("k\x1b]0;owned\x07", "k\\x1b]0;owned\\x07"),
        ("a\u202eb", "a\\u202eb"),
        ("tab\there", "tab\\there"),
        ("ünïcode ok", "ünïcode ok"),
        (None, ""),
    ],
)
def test_printable_escapes_control_and_format_characters(raw: Any, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize("text", ["0", "-1", "1000001", "abc", "1e3", ""])
def test_limit_refuses_what_is_not_1_to_a_million(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        limit(text)


@pytest.mark.parametrize("text", ["0", "²", "٣", "9" * 20, "-3"])
def test_row_id_refuses_what_is_not_a_row_id(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        row_id(text)


def test_notify_payloads_other_than_a_shard_number_are_ignored() -> None:
    payloads = _Payloads()
    assert [payloads.shard(p) for p in ("3", "0", "32767")] == [3, 0, 32767]
    for bad in ("²", "٣", "", "x", "-1", "32768", "9" * 400):
        assert payloads.shard(bad) is None
    assert payloads.ignored == 7


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (MessageSizeTooLargeError(), DeadLetterFailure.TOO_LARGE),
        (InvalidTopicError(), DeadLetterFailure.INVALID_TOPIC),
        (TopicAuthorizationFailedError(), DeadLetterFailure.NOT_AUTHORIZED),
        (KafkaConnectionError(), None),
        (UnknownTopicOrPartitionError(), None),
    ],
    ids=lambda v: type(v).__name__,
)
def test_dead_letter_failures_that_can_never_succeed(
    error: Exception, reason: DeadLetterFailure | None
) -> None:
    assert dead_letter_failure(error) is reason


def _entry(payload: bytes, **headers: bytes) -> Any:
    fields = {b"key": b"k", b"payload": payload, b"h:content-type": b"application/json"}
    fields.update({f"h:{k}".encode(): v for k, v in headers.items()})
    return entry_record("t", "t", b"1-0", fields)


@pytest.mark.parametrize(
    "payload",
    [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"\xff"],
    ids=["nested-array", "nested-object", "bad-utf8"],
)
def test_any_decoding_failure_is_a_poison_record(payload: bytes) -> None:
    with pytest.raises(PoisonRecord):
        decode(_entry(payload))


def test_two_different_event_ids_make_a_poison_record() -> None:
    record = _entry(b"{}")
    forged = type(record)(
        **{
            **record.__dict__,
            "headers": [
                ("event_id", b"00000000-0000-0000-0000-000000000001"),
                ("event_id", b"00000000-0000-0000-0000-000000000002"),
            ],
        }
    )
    with pytest.raises(PoisonRecord, match="appears twice"):
        decode(forged)
