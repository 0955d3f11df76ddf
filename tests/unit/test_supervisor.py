"""The daemons' loop recipes (outbox_core/supervisor.py): sleeping that wakes early,
retrying with backoff."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from outbox_core.supervisor import Supervisor, Wake


def supervisor() -> Supervisor:
    return Supervisor(logging.getLogger("test.supervisor"))


async def test_sleep_ends_at_its_time_or_when_a_wake_is_set() -> None:
    sup, wake = supervisor(), Wake()
    started = time.monotonic()
    await sup.sleep(0.05, wake)
    assert time.monotonic() - started >= 0.04

    asyncio.get_running_loop().call_later(0.01, wake.set)
    started = time.monotonic()
    await sup.sleep(10.0, wake)
    assert time.monotonic() - started < 5.0
    assert not wake._sleepers  # nothing left registered

    await sup.sleep(10.0, wake)  # already set: returns at once
    wake.clear()
    asyncio.get_running_loop().call_later(0.01, sup.stop)
    await sup.sleep(10.0, wake)  # stopping wakes it too


async def test_sleep_watches_a_plain_event_too() -> None:
    sup, event = supervisor(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    started = time.monotonic()
    await sup.sleep(10.0, event)
    assert time.monotonic() - started < 5.0


async def test_retry_logs_each_failure_with_its_attempt_and_returns_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sup, calls = supervisor(), []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError(f"down {len(calls)}")
        return "up"

    with caplog.at_level(logging.WARNING, logger="test.supervisor"):
        assert await sup.retry("probe", flaky, lambda e: isinstance(e, ConnectionError)) == "up"
    assert len(calls) == 3
    attempts = [r.__dict__["attempt"] for r in caplog.records if "probe failed" in r.message]
    assert attempts == [1, 2]


async def test_retry_raises_what_is_not_retriable_and_stops_when_stopping() -> None:
    sup = supervisor()

    async def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await sup.retry("step", broken, lambda e: isinstance(e, ConnectionError))

    async def down() -> None:
        raise ConnectionError("down")

    asyncio.get_running_loop().call_later(0.05, sup.stop)
    with pytest.raises(ConnectionError):
        await sup.retry("step", down, lambda e: True)
