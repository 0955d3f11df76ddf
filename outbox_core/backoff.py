"""The one exponential backoff every loop and row uses.

`delay_s(n)` is the wait before the (n+1)-th try after n failures: `base_s * 2**n`,
capped at `max_s`, optionally drawn from its upper half so that many waiters that failed
together do not come back together. `Backoff` is the same sequence kept by a loop that
retries in place (it does not persist its attempts the way an outbox row does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# 2.0**1024 overflows a float; any exponent past the cap's is the cap anyway.
_MAX_EXPONENT = 1023


def delay_s(failures: int, *, base_s: float, max_s: float, jitter: bool = False) -> float:
    """The wait after `failures` failures (0 gives `base_s`)."""
    ceiling = min(max_s, base_s * 2.0 ** min(max(failures, 0), _MAX_EXPONENT))
    return ceiling * random.uniform(0.5, 1.0) if jitter else ceiling


@dataclass
class Backoff:
    """Failures counted in memory; `next_s()` returns the wait and counts one more."""

    base_s: float
    max_s: float
    jitter: bool = False
    failures: int = field(default=0, init=False)

    def next_s(self) -> float:
        wait = delay_s(self.failures, base_s=self.base_s, max_s=self.max_s, jitter=self.jitter)
        self.failures += 1
        return wait

    def reset(self) -> None:
        self.failures = 0
