"""The relay against a broker that enforces ACLs (a private SASL_SSL broker with the
StandardAuthorizer), its principal granted what docs/security.md lists except
DescribeConfigs, and denied Write on one topic:

- with no DescribeConfigs, records far larger than the 16 KiB batches the relay then
  builds still publish (alone), and none is parked for a size it only guessed;
- a topic it may describe but not write fails its rows as TopicDenied: they back off,
  uncharged, and are never parked however many attempts, while other topics publish.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from relay.config import RelaySettings
from relay.pipeline.step import Step
from relay.transport.kafka import KafkaPublisher
from tests.support.db import Backend, sqlite_backend
from tests.support.kafka import create_topics, read_topic, unique_topic_name
from tests.support.relay import relay_settings
from tests.support.secure_kafka import SECURE_KAFKA, SecureBroker, add_acls
from tests.support.stores import emit, event, keys_on_shard, opened_store, row_states

pytestmark = [pytest.mark.integration, SECURE_KAFKA]

DENIED = unique_topic_name("denied")
SHARD = 1


@pytest.fixture(scope="module")
def broker(secure_kafka: SecureBroker) -> SecureBroker:
    """The session's secure broker (no DescribeConfigs for the SCRAM user anywhere), where
    this module's user may not write DENIED."""
    add_acls(secure_kafka, f"TOPIC:{DENIED}:WRITE:deny")
    return secure_kafka


def settings_for(
    backend: Backend, broker: SecureBroker, tmp_path: Path, **over: Any
) -> RelaySettings:
    secret = tmp_path / "sasl-password"
    secret.write_text(broker.scram_password)
    return relay_settings(
        backend,
        broker.sasl_ssl,
        kafka_security_protocol="SASL_SSL",
        kafka_ssl_cafile=broker.ca,
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username=broker.scram_user,
        kafka_sasl_password_file=str(secret),
        backoff_base_s=0.05,
        backoff_max_s=0.1,
        **over,
    )


async def steps(settings: RelaySettings, backend: Backend, done: Any, limit: int = 60) -> None:
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        async with opened_store(backend) as store:
            token = await store.lease_acquire(SHARD, settings.leases.replica_id, 60)
            assert token is not None
            step = Step(settings.batch_rules(), store=store, publisher=publisher)
            for _ in range(limit):
                outcome = await step.run({SHARD: token})
                if outcome.fatal_producer_error:
                    await publisher.recreate()
                if done():
                    return
                await asyncio.sleep(0.05)
    finally:
        await publisher.stop()
    raise AssertionError(f"not done after {limit} steps: {row_states(backend)}")


async def test_without_describe_configs_large_valid_records_still_publish(
    broker: SecureBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay.topics")
    topic = unique_topic_name("large")
    await create_topics(broker.plaintext, [topic])  # max.message.bytes: the broker's 1 MB
    backend = sqlite_backend(tmp_path / "outbox.sqlite3")
    backend.migrate()
    keys = keys_on_shard(SHARD, 8)
    ids = emit(
        backend,
        *(
            event(k, topic=topic, payload={"n": n, "blob": "x" * (200_000 if n % 2 else 100)})
            for n, k in enumerate(keys)
        ),
    )
    settings = settings_for(backend, broker, tmp_path)
    await steps(settings, backend, lambda: all(s.published for s in row_states(backend).values()))
    states = row_states(backend)
    assert all(states[i].published and states[i].attempts == 0 for i in ids), states
    # The limit really was unknown: DescribeConfigs was refused.
    assert any("cannot read topic limits" in r.getMessage() for r in caplog.records)
    got = sorted(
        json.loads(r.value or b"{}")["n"] for r in await read_topic(broker.plaintext, topic)
    )
    assert got == list(range(len(keys)))


async def test_a_topic_it_may_not_write_backs_off_and_is_never_parked(
    broker: SecureBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay.topics")
    fine = unique_topic_name("fine")
    await create_topics(broker.plaintext, [fine, DENIED])
    backend = sqlite_backend(tmp_path / "outbox.sqlite3")
    backend.migrate()
    a, b = keys_on_shard(SHARD, 2)
    denied, ok = emit(
        backend, event(a, topic=DENIED, payload={"n": 0}), event(b, topic=fine, payload={"n": 1})
    )
    max_attempts = 2
    settings = settings_for(backend, broker, tmp_path, max_attempts=max_attempts)

    def well_past_max_attempts() -> bool:
        states = row_states(backend)
        return states[ok].published and states[denied].attempts >= max_attempts + 2

    await steps(settings, backend, well_past_max_attempts)
    state = row_states(backend)[denied]
    assert state.status == "pending"  # never parked for the ACL
    assert "TopicAuthorizationFailed" in (state.last_error or "")
    assert len(await read_topic(broker.plaintext, fine)) == 1
    assert [r for r in caplog.records if getattr(r, "topic", None) == DENIED]
