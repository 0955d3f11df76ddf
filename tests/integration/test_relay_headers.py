"""The headers the relay publishes on real Kafka: its own (event_id, event_type) come from
the row's columns and are never shadowed by a header of the same name in the row."""

from __future__ import annotations

import uuid

import pytest

from producer_lib import Outbox
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx

pytestmark = pytest.mark.integration


async def test_a_header_in_the_row_named_like_the_relays_own_never_shadows_them(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    """A consumer dedups on the event_id header and keeps the last of a repeated one: a
    row whose headers column carries event_id (or EVENT_TYPE) must not forge them."""
    topic = await new_topic("forge")
    with sync_tx(backend, "driver") as conn:
        real = str(Outbox().emit(conn, topic=topic, key="k", event_type="Real", payload={}))
    forged = str(uuid.uuid4())
    backend.execute("outbox_headers_forge", {"forged": forged})
    async with running_relay(relay_settings(backend, kafka_bootstrap)):
        await wait_drained(backend)
    [record] = await read_topic(kafka_bootstrap, topic)
    names = [name.lower() for name, _ in record.headers]
    assert names.count("event_id") == 1
    assert names.count("event_type") == 1
    assert record.header("event_id") == real.encode()
    assert record.header("event_type") == b"Real"
    assert record.header("x-user") == b"kept"
