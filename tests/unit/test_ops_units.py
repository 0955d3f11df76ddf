"""Small pieces of the operations work that need no server."""

from __future__ import annotations

import pytest

from consumer_lib import ConsumerConfigError, ConsumerSettings
from outbox_core.kafka_security import KafkaSecurity
from relay.batch import failure_reason
from relay.errors import PublishFailed


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("KafkaTimeoutError: batch expired after 30000 ms", "KafkaTimeoutError"),
        ("RecordTooLarge: record of 2048 bytes exceeds kafka_max_request_size", "RecordTooLarge"),
        ("record of 2048 bytes exceeds the limit", "other"),  # free text: never a label
        ("broker said no", "other"),
        ("", "other"),
    ],
)
def test_failure_reasons_are_a_bounded_set_of_error_classes(message: str, reason: str) -> None:
    assert failure_reason(PublishFailed(message, retriable=True)) == reason


@pytest.mark.parametrize(
    "bad", [{"http_port": 70000}, {"http_port": -1}, {"lag_interval_s": 0}, {"stall_after_s": -1}]
)
def test_consumer_ops_settings_are_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ConsumerConfigError):
        ConsumerSettings(
            security=KafkaSecurity.plaintext(),
            bootstrap_servers="kafka:9092",
            group_id="g",
            **bad,  # type: ignore[arg-type]
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
