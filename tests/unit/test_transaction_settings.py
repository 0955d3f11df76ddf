"""kafka_transactions' settings are refused at load when they cannot work (exit 2 like
every bad setting), a broker that refuses transactions is named at start-up, /healthz
fails while a transaction cannot end, and a progress record that is not one of ours
never stops a takeover."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import errors as kafka_errors

from outbox_core.kafka_security import KafkaSecurity
from relay.cli import main
from relay.config import load_settings
from relay.errors import RelayConfigError
from relay.service import RelayService
from relay.transport.errors import PublishFailed
from relay.transport.kafka import KafkaPublisher, classify
from relay.transport.progress import Progress, ProgressTopic
from relay.transport.transactions import ShardTransactions, TransactionsRefused

KAFKA = {
    "database_url": "sqlite:///relay.db",
    "kafka_bootstrap_servers": "localhost:9092",
    "kafka_security_protocol": "PLAINTEXT",
}


def test_transactions_are_off_by_default_and_name_a_producer_per_replica() -> None:
    kafka = load_settings(**KAFKA).kafka
    assert not kafka.transactions
    assert kafka.transactional_id("pod-7") == "outbox-relay-replica-pod-7"
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


# ---------------------------------------------------------------------------- start-up, health


def _service(tmp_path: Path) -> RelayService:
    settings = load_settings(
        **{**KAFKA, "database_url": f"sqlite:///{tmp_path / 'outbox.db'}"},  # never opened
        kafka_transactions=True,
    )
    return RelayService(settings)


def test_a_transactional_relay_has_one_producer_per_shard_for_both_lanes(tmp_path: Path) -> None:
    settings = load_settings(
        **{**KAFKA, "database_url": f"sqlite:///{tmp_path / 'outbox.db'}"},
        kafka_transactions=True,
        fair_tenants=True,
        tenant_bulk_rows=100,
    )
    service = RelayService(settings)
    assert isinstance(service.publisher, ShardTransactions)
    assert service.bulk_producer is None  # the lanes share the shards' producers


def test_healthz_fails_while_a_transaction_could_not_be_ended(tmp_path: Path) -> None:
    service = _service(tmp_path)
    publisher = service.publisher
    assert isinstance(publisher, ShardTransactions)
    assert service.healthz().ok
    publisher.stuck.add(3)
    probe = service.healthz()
    assert not probe.ok
    assert "could not be ended" in probe.detail
    assert "[3]" in probe.detail
    publisher.stuck.clear()
    assert service.healthz().ok


@pytest.mark.parametrize(
    "refusal",
    [
        kafka_errors.TransactionalIdAuthorizationFailed("outbox-relay-check"),
        kafka_errors.UnsupportedVersionError("InitProducerId"),
        kafka_errors.ClusterAuthorizationFailedError(),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_a_broker_that_refuses_transactions_is_named_at_start_up(
    refusal: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def nothing(self: object) -> None:
        return None

    async def refused(self: KafkaPublisher) -> None:
        raise classify(refusal)

    monkeypatch.setattr(ProgressTopic, "start", nothing)
    monkeypatch.setattr(KafkaPublisher, "start", refused)
    kafka = load_settings(**KAFKA, kafka_transactions=True).kafka
    publisher = ShardTransactions(kafka, KafkaSecurity.plaintext(), "r1")
    with pytest.raises(TransactionsRefused, match="refuses transactions") as caught:
        await publisher.start()
    assert type(refusal).__name__ in str(caught.value)
    assert isinstance(caught.value, RelayConfigError)  # exit code 2


async def test_a_broker_away_at_start_up_is_retried_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def nothing(self: object) -> None:
        return None

    async def away(self: KafkaPublisher) -> None:
        raise classify(kafka_errors.KafkaConnectionError("no broker"))

    monkeypatch.setattr(ProgressTopic, "start", nothing)
    monkeypatch.setattr(KafkaPublisher, "start", away)
    kafka = load_settings(**KAFKA, kafka_transactions=True).kafka
    with pytest.raises(PublishFailed) as caught:
        await ShardTransactions(kafka, KafkaSecurity.plaintext(), "r1").start()
    assert caught.value.retriable
