"""The one exponential backoff (outbox_core/backoff.py): its bounds, its jitter, and the
inputs it refuses."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from outbox_core.backoff import Backoff, BackoffError, BackoffPolicy
from outbox_core.errors import OutboxError


def lowest(low: float, high: float) -> float:
    return low


def highest(low: float, high: float) -> float:
    return high


# Known answers for base 0.5 s and cap 300 s: the ceiling after n failures.
CEILINGS = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0]


def test_without_jitter_the_wait_is_the_ceiling_doubling_up_to_the_cap() -> None:
    policy = BackoffPolicy(0.5, 300.0)
    assert [policy.delay_s(n) for n in range(len(CEILINGS))] == CEILINGS


@pytest.mark.parametrize("failures", [0, 1, 5, 10, 11, 1022, 1023, 1024, 5000, 10**9])
def test_a_jittered_wait_is_never_above_the_cap_nor_below_half_its_ceiling(
    failures: int,
) -> None:
    ceiling = BackoffPolicy(0.5, 300.0).delay_s(failures)
    assert BackoffPolicy(0.5, 300.0, jitter=True, draw=lowest).delay_s(failures) == ceiling / 2
    assert BackoffPolicy(0.5, 300.0, jitter=True, draw=highest).delay_s(failures) == ceiling
    policy = BackoffPolicy(0.5, 300.0, jitter=True, draw=random.Random(failures).uniform)
    samples = [policy.delay_s(failures) for _ in range(200)]
    assert all(0.25 <= ceiling / 2 <= s <= ceiling <= 300.0 for s in samples)
    # Drawn across the whole upper half, not pinned near one end of it.
    assert min(samples) < ceiling * 0.6
    assert max(samples) > ceiling * 0.9


def test_waits_grow_with_the_failures_until_the_cap() -> None:
    for draw in (lowest, highest):
        policy = BackoffPolicy(0.2, 10.0, jitter=True, draw=draw)
        waits = [policy.delay_s(n) for n in range(12)]
        assert waits == sorted(waits)
        assert waits[0] < waits[5] < waits[-1] == waits[-2]


def test_a_base_above_the_cap_waits_the_cap() -> None:
    assert BackoffPolicy(30.0, 5.0).delay_s(0) == 5.0


def test_a_loop_counts_its_failures_and_starts_over_after_a_success() -> None:
    backoff = Backoff(0.5, 30.0)
    assert [backoff.next_s() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    backoff.reset()
    assert backoff.next_s() == 0.5
    assert backoff.policy == BackoffPolicy(0.5, 30.0)


@pytest.mark.parametrize("failures", [-1, -(10**9), True, 1.5, math.nan, "3", None], ids=repr)
def test_a_failure_count_that_is_no_count_is_refused(failures: Any) -> None:
    with pytest.raises(BackoffError, match="failures must be a count"):
        BackoffPolicy(0.5, 300.0).delay_s(failures)


BAD_SECONDS = [0, 0.0, -1.0, -math.inf, math.inf, math.nan, True, "1", None]


@pytest.mark.parametrize("base_s", BAD_SECONDS, ids=repr)
def test_a_base_that_is_no_positive_finite_time_is_refused(base_s: Any) -> None:
    with pytest.raises(BackoffError, match="base_s"):
        BackoffPolicy(base_s, 10.0)
    with pytest.raises(BackoffError, match="base_s"):
        Backoff(base_s, 10.0)


@pytest.mark.parametrize("max_s", BAD_SECONDS, ids=repr)
def test_a_cap_that_is_no_positive_finite_time_is_refused(max_s: Any) -> None:
    with pytest.raises(BackoffError, match="max_s"):
        BackoffPolicy(0.5, max_s, jitter=True)


def test_the_refusal_is_the_projects_error_and_a_value_error() -> None:
    with pytest.raises(OutboxError) as info:
        BackoffPolicy(-1.0, 10.0)
    assert isinstance(info.value, ValueError)
    assert not info.value.retriable
