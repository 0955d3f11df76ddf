"""Kafka security settings: PLAINTEXT only when chosen; SSL and SASL complete or refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from outbox_core.kafka_security import KafkaSecurity, KafkaSecurityError
from relay.config import load_settings
from relay.errors import RelayConfigError

BASE: dict[str, Any] = {
    "database_url": "sqlite:///outbox.db",
    "kafka_bootstrap_servers": "127.0.0.1:9093",
}
CANARY = "canary-sasl-secret-771"


def test_no_protocol_chosen_is_refused_naming_the_setting() -> None:
    with pytest.raises(RelayConfigError, match="OUTBOX_KAFKA_SECURITY_PROTOCOL"):
        load_settings(**BASE)
    with pytest.raises(KafkaSecurityError, match="PLAINTEXT"):
        KafkaSecurity().check()


def test_plaintext_when_chosen() -> None:
    settings = load_settings(**BASE, kafka_security_protocol="PLAINTEXT")
    assert settings.kafka_security.resolve().client_options() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "SASL mechanism"),
        (
            {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "SCRAM-SHA-256"},
            "username",
        ),
        ({"kafka_security_protocol": "SSL", "kafka_sasl_username": "u"}, "SASL settings"),
        ({"kafka_security_protocol": "PLAINTEXT", "kafka_ssl_cafile": "/nope/ca.pem"}, "SSL files"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_cafile": "/nope/ca.pem"}, "does not exist"),
        ({"kafka_security_protocol": "SSL", "kafka_ssl_certfile": __file__}, "needs its key"),
        ({"kafka_security_protocol": "TLS"}, "OUTBOX_KAFKA_SECURITY_PROTOCOL"),
        (
            {
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_mechanism": "SCRAM-SHA-256",
                "kafka_sasl_username": "u",
                "kafka_sasl_password_file": "/nope/secret",
            },
            "cannot read SASL password file",
        ),
    ],
)
def test_incomplete_security_is_refused(override: dict[str, Any], message: str) -> None:
    with pytest.raises(RelayConfigError, match=message):
        load_settings(**BASE, **override)


def test_password_file_wins_and_is_a_secret(tmp_path: Path) -> None:
    secret = tmp_path / "sasl-password"
    secret.write_text(CANARY + "\n")
    settings = load_settings(
        **BASE,
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="relay",
        kafka_sasl_password="inline-is-ignored",
        kafka_sasl_password_file=str(secret),
    )
    options = settings.kafka_security.resolve().client_options()
    assert options["sasl_plain_password"] == CANARY
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["ssl_context"].check_hostname  # verification on by default
    assert CANARY in settings.secrets()
    assert CANARY not in repr(settings)
    assert CANARY not in repr(settings.kafka_security.resolve())


def test_hostname_verification_can_be_turned_off_explicitly() -> None:
    security = KafkaSecurity(protocol="SSL", ssl_check_hostname=False)
    context = security.client_options()["ssl_context"]
    assert context.check_hostname is False
