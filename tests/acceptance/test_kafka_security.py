"""The relay against a broker that demands TLS: mutual TLS, SASL_SSL with SCRAM, and the
failures an operator must see clearly (wrong password, wrong host name) without the
password ever being printed."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from producer_lib import Event, Outbox
from scripts.ports import reserved_port
from tests.support.db import Backend, sqlite_backend
from tests.support.kafka import create_topics, read_topic, unique_topic_name
from tests.support.relay import RelayProcess, relay_env, relay_settings, running_relay, wait_drained
from tests.support.secure_kafka import SCRAM_PASSWORD, SECURE_KAFKA, SecureBroker
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = [pytest.mark.integration, SECURE_KAFKA]

CANARY = SCRAM_PASSWORD


@pytest.fixture
def broker(secure_kafka: SecureBroker) -> SecureBroker:
    return secure_kafka


def _outbox_with_events(tmp_path: Path, topic: str, n: int) -> Backend:
    backend = sqlite_backend(tmp_path / "outbox.sqlite3")
    backend.migrate()
    with sync_tx(backend, "driver") as conn:
        Outbox().emit_batch(conn, [Event(topic, f"k{i % 5}", "E", {"i": i}) for i in range(n)])
    return backend


async def _deliver(broker: SecureBroker, tmp_path: Path, bootstrap: str, **security: Any) -> None:
    topic = unique_topic_name("secure")
    await create_topics(broker.plaintext, [topic])
    backend = _outbox_with_events(tmp_path, topic, 50)
    settings = relay_settings(backend, bootstrap, **security)
    async with running_relay(settings) as relay:
        await wait_drained(backend, 60)
    assert relay.stats.published == 50
    records = await read_topic(broker.plaintext, topic)
    assert len(records) == 50


async def test_mutual_tls(broker: SecureBroker, tmp_path: Path) -> None:
    await _deliver(
        broker,
        tmp_path,
        broker.ssl,
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=broker.ca,
        kafka_ssl_certfile=broker.client_cert,
        kafka_ssl_keyfile=broker.client_key,
    )


async def test_sasl_scram_with_a_password_file(broker: SecureBroker, tmp_path: Path) -> None:
    secret = tmp_path / "sasl-password"
    secret.write_text(CANARY + "\n")
    await _deliver(
        broker,
        tmp_path,
        broker.sasl_ssl,
        kafka_security_protocol="SASL_SSL",
        kafka_ssl_cafile=broker.ca,
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username=broker.scram_user,
        kafka_sasl_password_file=str(secret),
    )


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


async def _not_ready_then_stop(env: dict[str, str], log: Path, metrics_port: int) -> str:
    proc = RelayProcess(env, log)
    try:
        status: tuple[int, str] = (0, "")
        for _ in range(150):
            await asyncio.sleep(0.2)
            try:
                status = await asyncio.to_thread(_readyz, metrics_port)
            except OSError:
                continue  # not listening yet
            break
        assert status[0] == 503, status
        assert "kafka" in status[1]
        # Let it retry and log a few times.
        await until(
            lambda: proc.log().count("kafka start failed; retrying") >= 2,
            60,
            "two failed starts logged",
            alive=proc.check_alive,
        )
    finally:
        assert proc.terminate(60) == 0, proc.log()
    return proc.log()


async def test_wrong_password_is_not_ready_and_never_printed(
    broker: SecureBroker, tmp_path: Path
) -> None:
    topic = unique_topic_name("secure")
    backend = _outbox_with_events(tmp_path, topic, 1)
    port = reserved_port()
    wrong = CANARY + "-wrong"
    env = relay_env(
        backend,
        broker.sasl_ssl,
        kafka_security_protocol="SASL_SSL",
        kafka_ssl_cafile=broker.ca,
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username=broker.scram_user,
        kafka_sasl_password=wrong,
        http_port=port,
        log_level="DEBUG",
    )
    output = await _not_ready_then_stop(env, tmp_path / "relay.log", port)
    assert "kafka start failed; retrying" in output
    assert CANARY not in output  # neither the wrong password nor the right one's prefix
    assert backend.scalar("outbox_unpublished") == 1  # nothing lost while it waited


async def test_hostname_verification_is_on_by_default(broker: SecureBroker, tmp_path: Path) -> None:
    """The broker's certificate names 127.0.0.1 only: by the name localhost it is refused."""
    topic = unique_topic_name("secure")
    backend = _outbox_with_events(tmp_path, topic, 1)
    port = reserved_port()
    tls = {
        "kafka_security_protocol": "SSL",
        "kafka_ssl_cafile": broker.ca,
        "kafka_ssl_certfile": broker.client_cert,
        "kafka_ssl_keyfile": broker.client_key,
    }
    by_name = broker.ssl.replace("127.0.0.1", "localhost")
    env = relay_env(backend, by_name, http_port=port, **tls)
    await _not_ready_then_stop(env, tmp_path / "relay.log", port)
    # The same name with verification explicitly off connects: the check above was the name.
    await _deliver(broker, tmp_path / "off", by_name, kafka_ssl_check_hostname=False, **tls)
