"""The one exponential backoff: an outbox row's persisted attempts, a loop that retries in
place, and the supervisor's retry policy (tenacity runs that loop; its waits are these).

After n failures the ceiling is `base_s * 2**n`, capped at `max_s`. Without jitter the
wait is the ceiling; with jitter it is drawn uniformly from the ceiling's upper half, so
that many waiters that failed together do not come back together, yet every wait is at
least half its ceiling: it still grows with the failures, and a broker or database that
is down is never retried at once (a draw from the whole range can come out near zero).

A base or cap that is not a positive finite number of seconds, or a negative count of
failures, is a caller's bug: `BackoffError`, never a zero or endless wait.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from outbox_core.errors import OutboxError

# 2.0**1024 overflows a float; any exponent past the cap's is the cap anyway.
_MAX_EXPONENT = 1023


class BackoffError(OutboxError, ValueError):
    """A backoff with a base or cap that is not a positive finite number of seconds, or
    asked for the wait after a negative number of failures."""


@dataclass(frozen=True)
class BackoffPolicy:
    """Base and cap in seconds, and whether waits are jittered. `draw(low, high)` picks a
    jittered wait (random.uniform; a seeded one where a test needs the exact sequence)."""

    base_s: float
    max_s: float
    jitter: bool = False
    draw: Callable[[float, float], float] = field(default=random.uniform, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("base_s", "max_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BackoffError(f"backoff {name} must be a number of seconds, not {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise BackoffError(
                    f"backoff {name} must be a positive finite number of seconds, not {value!r}"
                )

    def delay_s(self, failures: int) -> float:
        """The wait after `failures` failures (0: before the second try)."""
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise BackoffError(f"failures must be a count (0 or more), not {failures!r}")
        ceiling = min(self.max_s, self.base_s * 2.0 ** min(failures, _MAX_EXPONENT))
        return self.draw(ceiling / 2, ceiling) if self.jitter else ceiling


class Backoff:
    """The policy's waits for a loop that retries in place: failures counted in memory
    (an outbox row persists its own). `next_s()` returns the wait and counts one more."""

    def __init__(self, base_s: float, max_s: float, *, jitter: bool = False) -> None:
        self.policy = BackoffPolicy(base_s, max_s, jitter)
        self.failures = 0

    def next_s(self) -> float:
        wait = self.policy.delay_s(self.failures)
        self.failures += 1
        return wait

    def reset(self) -> None:
        self.failures = 0
