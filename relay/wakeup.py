"""How soon the relay looks for new rows: the pacing of the cycle (cycle.py).

An empty claim over every held shard is the probe (one statement, one short index walk
per shard). While rows come, a cycle starts every interval_s, so a committed event is
found within a few milliseconds without a NOTIFY per row; after idle_after_s with
nothing found it runs every idle_interval_s, so an idle relay costs little; the first
find brings it back to interval_s. NOTIFY hints, when on, start a cycle at once.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from outbox_core.settings import SettingsGroup


class ProbeSettings(SettingsGroup):
    env_infix: ClassVar[str] = "probe_"

    interval_s: float = Field(
        default=0.005,
        gt=0,
        description="While rows come, how often a cycle claims for every held shard (the "
        "wake-up path: commit-to-claim latency is about half of it).",
    )
    idle_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="The cycle's interval once it has found nothing for idle_after_s: what "
        "an idle relay costs (and the latency of the first event after a quiet spell).",
    )
    idle_after_s: float = Field(
        default=1.0, ge=0, description="Quiet time after which the cycle slows down."
    )

    @model_validator(mode="after")
    def _intervals(self) -> ProbeSettings:
        if self.interval_s > self.idle_interval_s:
            raise ValueError(
                "probe_interval_s (OUTBOX_PROBE_INTERVAL_S) must not exceed "
                "probe_idle_interval_s (OUTBOX_PROBE_IDLE_INTERVAL_S)"
            )
        return self
