"""The daemons' loop recipes (outbox_core/supervisor.py): sleeping that wakes early,
retrying with backoff."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import pytest

from outbox_core.backoff import BackoffPolicy
from outbox_core.supervisor import RETRY_BACKOFF, Supervisor, Wake


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


def seeded_policy() -> BackoffPolicy:
    return BackoffPolicy(base_s=0.2, max_s=10.0, jitter=True, draw=random.Random(7).uniform)


async def test_retry_waits_exactly_the_core_backoffs_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try runs outside tenacity and the rest inside it; either way the wait
    after the n-th failure is outbox_core.backoff's delay_s(n - 1), nothing else."""
    sup = Supervisor(logging.getLogger("test.supervisor"), retry_backoff=seeded_policy())
    waits: list[float] = []

    async def no_sleep(seconds: float, *wake: asyncio.Event) -> None:
        waits.append(seconds)

    monkeypatch.setattr(sup, "sleep", no_sleep)
    failures = 9  # past the cap (0.2 s doubled six times is above 10 s)

    async def flaky() -> str:
        if len(waits) < failures:
            raise ConnectionError("down")
        return "up"

    assert await sup.retry("probe", flaky, lambda e: isinstance(e, ConnectionError)) == "up"
    expected = seeded_policy()
    assert waits == [expected.delay_s(n) for n in range(failures)]
    assert waits[-1] != waits[-2]  # jittered at the cap too, not one fixed value


def test_the_daemons_retry_with_the_jittered_retry_backoff() -> None:
    assert Supervisor(logging.getLogger("test.supervisor")).retry_backoff is RETRY_BACKOFF
    assert (RETRY_BACKOFF.base_s, RETRY_BACKOFF.max_s, RETRY_BACKOFF.jitter) == (0.2, 10.0, True)
