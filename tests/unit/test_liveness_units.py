"""What counts as progress for /healthz (RelayObserver.cycle and stalled): a cycle that
settled a row or found none due; a claim whose rows were all held back, or no cycle at
all, is none."""

from __future__ import annotations

import time

from relay.ops.observer import RelayObserver
from relay.pipeline.step import BatchOutcome


def observer_quiet_for(seconds: float, *lanes: str) -> RelayObserver:
    observer = RelayObserver()
    for lane in lanes:
        observer.stats.progress[lane] = time.monotonic() - seconds
    return observer


def test_no_lane_running_is_no_stall() -> None:
    assert RelayObserver().stalled(1.0) is None


def test_a_lane_quiet_past_the_limit_is_named() -> None:
    observer = observer_quiet_for(100, "lane-quick")
    observer.stats.progress["lane-bulk"] = time.monotonic()
    stalled = observer.stalled(50)
    assert stalled is not None
    assert stalled.startswith("lane-quick: nothing settled for 100s")
    assert observer.stalled(500) is None


def test_rows_claimed_and_all_held_back_are_no_progress() -> None:
    observer = observer_quiet_for(100, "lane")
    observer.cycle("lane", BatchOutcome(claimed=5, held_back=5))
    assert observer.stalled(50) is not None


def test_settled_rows_or_nothing_due_are_progress() -> None:
    for outcome in (
        BatchOutcome(0),
        BatchOutcome(3, published=1),
        BatchOutcome(3, retried=1),
        BatchOutcome(3, parked=1),
        None,
    ):
        observer = observer_quiet_for(100, "lane")
        observer.cycle("lane", outcome)
        assert observer.stalled(50) is None, outcome
