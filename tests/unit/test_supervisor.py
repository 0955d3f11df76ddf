"""The daemons' loop recipes (outbox_core/supervisor.py): sleeping that wakes early,
retrying with backoff."""

from __future__ import annotations

import asyncio
import contextlib
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


async def test_cancel_all_cancels_again_a_task_that_swallowed_its_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sup, swallowed = supervisor(), asyncio.Event()

    async def swallows_once() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # what Python 3.11's wait_for does when its awaitable just ended
        await asyncio.Event().wait()

    sup.spawn("swallower", swallows_once)
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="test.supervisor"):
        await sup.cancel_all(wait_s=30)
    assert swallowed.is_set()
    assert not caplog.records  # ended on the second cancellation, no warning
    assert sup.tasks == {}


async def test_cancel_all_stops_waiting_for_a_task_that_will_not_end_and_says_where_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sup, release = supervisor(), asyncio.Event()

    async def stubborn_wait() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    sup.spawn("stubborn", stubborn_wait)
    sup.spawn("polite", lambda: asyncio.sleep(3600))
    await asyncio.sleep(0)
    tasks = dict(sup.tasks)
    try:
        with caplog.at_level(logging.WARNING, logger="test.supervisor"):
            await sup.cancel_all(wait_s=0.3)
        assert tasks["polite"].cancelled()
        [warning] = caplog.records
        assert warning.getMessage() == "task did not stop when cancelled; stopping without it"
        assert warning.task == "stubborn"  # type: ignore[attr-defined]
        assert " > stubborn_wait (" in warning.waiting_at  # type: ignore[attr-defined]
        assert "test_supervisor.py:" in warning.waiting_at  # type: ignore[attr-defined]
    finally:
        release.set()
        tasks["stubborn"].cancel()
        await asyncio.wait({tasks["stubborn"]})
