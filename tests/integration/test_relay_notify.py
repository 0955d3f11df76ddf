"""The optional NOTIFY hint wakes an idle relay; its listener survives a killed connection.

The relay is configured to idle for 30 s between cycles, so an event that arrives within
the test's bound can only have been woken by the hint.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from producer_lib import Outbox
from relay.pipeline.step import BatchOutcome
from tests.conftest import TopicFactory
from tests.support.db import Backend, postgres_backend
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration

IDLE_S = 30.0


class Idle:
    """When the relay's cycles end, and when its listener (re)started listening: the relay
    is idle once a cycle ended after the listener's wake-up, and sleeps IDLE_S from then."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO, logger="relay.notify")
        self._caplog = caplog
        self.cycle_ends: list[float] = []

    def on_batch(self, outcome: BatchOutcome) -> None:
        self.cycle_ends.append(time.time())

    async def wait(self, listens: int) -> None:
        def idle() -> bool:
            began = [
                r.created
                for r in self._caplog.records
                if r.getMessage() == "listening for notify hints"
            ]
            return len(began) >= listens and any(t > began[listens - 1] for t in self.cycle_ends)

        await until(idle, 30, f"listen #{listens} and the cycle it woke")


async def _emit_and_wait(backend: Backend, outbox: Outbox, topic: str, n: int) -> float:
    with sync_tx(backend, "driver") as conn:
        outbox.emit(conn, topic=topic, key=f"k{n}", event_type="E", payload={"n": n})
    started = time.monotonic()
    await wait_drained(backend, timeout=IDLE_S / 3)
    return time.monotonic() - started


async def _listeners(backend: Backend, want: int) -> None:
    for _ in range(100):
        if await asyncio.to_thread(backend.scalar, "notify_listener_count") == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"expected {want} notify listener connection(s)")


async def test_notify_wakes_idle_shards_and_listener_reconnects(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    backend = postgres_backend(pg_url)
    backend.migrate()
    topic = await new_topic("hinted")
    outbox = Outbox(notify_channel="outbox_events")
    settings = relay_settings(
        backend,
        kafka_bootstrap,
        listen_notify=True,
        probe_interval_s=IDLE_S,  # a cycle would find it first: out of the way here
        probe_idle_interval_s=IDLE_S,
    )
    idle = Idle(caplog)
    async with running_relay(settings, on_batch=idle.on_batch) as relay:
        await idle.wait(listens=1)
        assert await _emit_and_wait(backend, outbox, topic, 1) < IDLE_S / 3
        assert await asyncio.to_thread(backend.scalar, "notify_listener_kill") == 1
        await idle.wait(listens=2)  # the listener came back by itself
        await _listeners(backend, 1)
        assert await _emit_and_wait(backend, outbox, topic, 2) < IDLE_S / 3
    assert relay.stats.published == 2


async def test_without_the_hint_an_idle_relay_waits(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The control: the same idle relay, a producer without notify_channel: not woken early."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    topic = await new_topic("unhinted")
    settings = relay_settings(
        backend,
        kafka_bootstrap,
        listen_notify=True,
        probe_interval_s=IDLE_S,  # a cycle would find it first: out of the way here
        probe_idle_interval_s=IDLE_S,
    )
    idle = Idle(caplog)
    async with running_relay(settings, on_batch=idle.on_batch):
        await idle.wait(listens=1)
        # Not published within a third of the idle wait: time itself is what is tested.
        with pytest.raises(TimeoutError):
            await _emit_and_wait(backend, Outbox(), topic, 1)


async def test_malformed_notify_payloads_are_ignored_and_the_listener_keeps_its_connection(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """ "²" passes str.isdigit() and fails int(): like any payload that is not a shard
    number, it is logged and ignored; the listener neither dies nor reconnects, and the
    next real hint still wakes the relay."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    topic = await new_topic("hinted")
    outbox = Outbox(notify_channel="outbox_events")
    settings = relay_settings(
        backend,
        kafka_bootstrap,
        listen_notify=True,
        probe_interval_s=IDLE_S,
        probe_idle_interval_s=IDLE_S,
    )
    idle = Idle(caplog)
    async with running_relay(settings, on_batch=idle.on_batch) as relay:
        await idle.wait(listens=1)
        [(pid,)] = await asyncio.to_thread(backend.fetch, "notify_listener_pid")
        for payload in ("²", "٣", "x", "", "99999999999999999999", "-1"):
            await asyncio.to_thread(
                backend.fetch, "notify_send", {"channel": "outbox_events", "payload": payload}
            )
        assert await _emit_and_wait(backend, outbox, topic, 1) < IDLE_S / 3
        assert await asyncio.to_thread(backend.fetch, "notify_listener_pid") == [(pid,)]
    assert relay.stats.published == 1
    assert any("not a shard number" in r.getMessage() for r in caplog.records)
