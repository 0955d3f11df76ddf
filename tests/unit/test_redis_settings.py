"""The Redis settings: the transport choice, a password read from a file and kept out of
logs, trimming off unless chosen, and typed errors for bad values."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from outbox_core import logs
from outbox_core.redis_connection import RedisSettings
from relay.config import RelaySettings, load_settings
from relay.errors import RelayConfigError


def _redis(**over: object) -> RelaySettings:
    return load_settings(**{"database_url": "sqlite:///x.db", "transport": "redis", **over})


def test_redis_transport_needs_no_kafka_setting_and_trims_nothing_by_default() -> None:
    settings = _redis(redis_url="redis://127.0.0.1:6379/0")
    assert settings.kafka.bootstrap_servers is None
    assert settings.redis_stream.maxlen is None
    assert settings.redis_stream.max_age_s is None


def test_kafka_transport_still_requires_its_bootstrap_servers() -> None:
    with pytest.raises(RelayConfigError, match="kafka_bootstrap_servers is required"):
        load_settings(database_url="sqlite:///x.db", kafka_security_protocol="PLAINTEXT")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("transport", "rabbit", "transport"),
        ("redis_url", "http://x", "redis_url"),
        ("redis_stream_maxlen", 0, "redis_stream_maxlen"),
        ("redis_stream_max_age_s", -1, "redis_stream_max_age_s"),
    ],
)
def test_bad_values_are_a_typed_config_error_naming_the_setting(
    name: str, value: object, message: str
) -> None:
    with pytest.raises(RelayConfigError, match=message):
        _redis(**{name: value})


def test_the_password_comes_from_its_file_and_is_redacted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"cnry{uuid.uuid4().hex[:12]}"
    path = tmp_path / "redis-password"
    path.write_text(secret + "\n")
    settings = _redis(redis_username="relay", redis_password_file=str(path))
    assert settings.redis.resolved_password() == secret
    assert secret in settings.secrets()
    assert secret not in repr(settings)
    logs.add_secrets(settings.secrets())
    record = logging.LogRecord("relay", logging.WARNING, __file__, 1, f"auth {secret}", None, None)
    assert secret not in logs.JsonFormatter().format(record)


def test_an_unreadable_password_file_is_a_config_error() -> None:
    with pytest.raises(Exception, match="cannot read redis password file"):
        RedisSettings(password_file="/nonexistent/redis-password").resolved_password()
