"""kafka_transactions' settings are refused at load when they cannot work (exit 2 like
every bad setting), and a progress record that is not one of ours never stops a
takeover."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.cli import main
from relay.config import load_settings
from relay.errors import RelayConfigError
from relay.transport.progress import Progress

KAFKA = {
    "database_url": "sqlite:///relay.db",
    "kafka_bootstrap_servers": "localhost:9092",
    "kafka_security_protocol": "PLAINTEXT",
}


def test_transactions_are_off_by_default_and_name_a_producer_per_shard() -> None:
    kafka = load_settings(**KAFKA).kafka
    assert not kafka.transactions
    assert kafka.transactional_id(7) == "outbox-relay-shard-7"
    assert kafka.transaction_timeout_ms < load_settings(**KAFKA).leases.lease_ttl_s * 1000


def test_transactions_with_the_redis_transport_are_refused() -> None:
    with pytest.raises(RelayConfigError, match=r"kafka_transactions.*transport=kafka"):
        load_settings(database_url="sqlite:///relay.db", transport="redis", kafka_transactions=True)


@pytest.mark.parametrize(("timeout_ms", "ttl_s"), [(10_000, 10.0), (20_000, 10.0), (3000, 3.0)])
def test_a_transaction_timeout_not_below_the_lease_ttl_is_refused(
    timeout_ms: int, ttl_s: float
) -> None:
    with pytest.raises(RelayConfigError, match=r"TRANSACTION_TIMEOUT_MS.*LEASE_TTL_S"):
        load_settings(
            **KAFKA,
            kafka_transactions=True,
            kafka_transaction_timeout_ms=timeout_ms,
            lease_ttl_s=ttl_s,
            heartbeat_interval_s=1.0,
        )


def test_the_timeout_is_only_checked_with_transactions_on() -> None:
    settings = load_settings(**KAFKA, kafka_transaction_timeout_ms=60_000)
    assert not settings.kafka.transactions


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("kafka_transactional_id_prefix", ""),
        ("kafka_transactional_id_prefix", "has space"),
        ("kafka_transactional_id_prefix", "x" * 201),
        ("kafka_transactional_id_prefix", "semi;colon"),
        ("kafka_progress_topic", ""),
        ("kafka_progress_topic", ".."),
        ("kafka_progress_topic", "no/slash"),
        ("kafka_progress_topic", "t" * 250),
        ("kafka_transaction_timeout_ms", 0),
        ("kafka_transaction_timeout_ms", -5),
        ("kafka_transaction_timeout_ms", "soon"),
        ("kafka_transactions", "maybe"),
    ],
)
def test_hostile_transaction_settings_are_refused(name: str, value: Any) -> None:
    with pytest.raises(RelayConfigError, match=name):
        load_settings(**{**KAFKA, "kafka_transactions": True, name: value})


def test_bad_transaction_settings_from_the_environment_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {**KAFKA, "transport": "redis", "kafka_transactions": "true"}.items():
        monkeypatch.setenv(f"OUTBOX_{name.upper()}", value)
    assert main(["run"]) == 2
    assert "OUTBOX_KAFKA_TRANSACTIONS" in capsys.readouterr().err


def _value(**over: Any) -> bytes:
    return json.dumps({"v": 1, "shard": 3, "token": 9, "ids": [1, 2], **over}).encode()


def test_a_progress_record_round_trips() -> None:
    progress = Progress(3, 9, (1, 2, 5))
    record = progress.record("p")
    assert (record.topic, record.key) == ("p", b"3")
    assert Progress.decode(record.key, record.value) == progress


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"3", None),
        (b"3", b""),
        (b"3", b"\xff\xfe"),
        (b"3", b"not json"),
        (b"3", b"[1, 2]"),
        (b"3", b"null"),
        (b"3", _value(v=2)),
        (b"3", _value(shard="3")),
        (b"3", _value(token=None)),
        (b"3", _value(ids="1,2")),
        (b"3", _value(ids=[1, "2"])),
        (b"3", _value(ids=[1.5])),
        (b"3", _value(shard=True)),
        (b"4", _value()),  # keyed as another shard
        (None, _value()),
    ],
)
def test_a_record_that_is_not_our_progress_is_ignored(
    key: bytes | None, value: bytes | None
) -> None:
    assert Progress.decode(key, value) is None
