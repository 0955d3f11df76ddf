"""Small pieces of the operations work that need no server."""

from __future__ import annotations

import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    UnknownTopicOrPartitionError,
)

from consumer_lib import ConsumerConfigError, ConsumerSettings
from outbox_core.kafka_security import KafkaSecurity
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import classify


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (KafkaTimeoutError("batch expired after 30000 ms"), "Timeout"),
        (MessageSizeTooLargeError("record of 2048 bytes"), "RecordTooLarge"),
        (UnknownTopicOrPartitionError("orders-7"), "UnknownTopic"),
        (ValueError("record of 2048 bytes exceeds the limit"), "Refused"),
    ],
)
def test_failure_reasons_are_a_bounded_set_of_error_classes(error: Exception, reason: str) -> None:
    """The metric label is the reason classify set, never text out of the message: the
    free text varies per row and would grow the label set without bound."""
    failed = classify(error)
    assert failed.reason.label == reason
    labels = [r.label for r in FailureReason]
    assert len(set(labels)) == len(labels)
    assert all(label.isidentifier() for label in labels)


def test_a_failure_reason_never_comes_from_a_message() -> None:
    failed = PublishFailed(FailureReason.REFUSED, "RecordTooLarge: made to look like one")
    assert failed.reason.label == "Refused"
    assert str(failed) == "RecordTooLarge: made to look like one"


@pytest.mark.parametrize(
    "bad", [{"http_port": 70000}, {"http_port": -1}, {"lag_interval_s": 0}, {"stall_after_s": -1}]
)
def test_consumer_ops_settings_are_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ConsumerConfigError):
        ConsumerSettings(
            security=KafkaSecurity.plaintext(),
            bootstrap_servers="kafka:9092",
            group_id="g",
            **bad,
        )


def test_consumer_kafka_security_must_be_chosen() -> None:
    with pytest.raises(ConsumerConfigError, match="plaintext"):
        ConsumerSettings(bootstrap_servers="kafka:9092", group_id="g")
    with pytest.raises(ConsumerConfigError, match="SASL"):
        ConsumerSettings(
            bootstrap_servers="kafka:9092",
            group_id="g",
            security=KafkaSecurity(protocol="SASL_SSL"),
        )
