"""How the Redis Streams source runs: RedisSourceSettings, checked when it is made.

The ConsumerApp's own settings still rule what is shared with the Kafka path: group_id,
max_attempts, backoff_base_s / backoff_max_s, missing_event_id, unhandled.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from consumer_lib.errors import ConsumerConfigError
from outbox_core.redis_connection import RedisSettings


def _default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class RedisSourceSettings:
    redis: RedisSettings = field(default_factory=RedisSettings)
    # Stream of a topic: prefix + topic (the relay's topic_prefix/topic_map made the name).
    stream_prefix: str = ""
    # This consumer within the group; unique per process (a restarted process with the same
    # name takes its own pending entries back at start).
    consumer_name: str = field(default_factory=_default_name)
    # Entries pending (delivered, not acked) longer than this are claimed from whichever
    # consumer holds them: it crashed or is paused. Longer than any handler's run.
    claim_idle_s: float = 30.0
    claim_interval_s: float = 5.0  # how often pending entries are looked at (and at start)
    count: int = 100  # entries per XREADGROUP / XAUTOCLAIM call
    block_ms: int = 1000  # how long XREADGROUP waits for new entries
    dead_letter_suffix: str = ".DLT"  # dead-letter stream: <stream><suffix>
    gauges_interval_s: float = 5.0  # pending, oldest pending age, lag refresh

    def stream_for(self, topic: str) -> str:
        return self.stream_prefix + topic

    def __post_init__(self) -> None:
        if not self.consumer_name.strip():
            raise ConsumerConfigError("consumer_name must not be empty")
        if self.claim_idle_s <= 0 or self.claim_interval_s <= 0 or self.gauges_interval_s <= 0:
            raise ConsumerConfigError(
                "claim_idle_s, claim_interval_s and gauges_interval_s must be positive"
            )
        if self.count < 1 or self.block_ms < 1:
            raise ConsumerConfigError("count and block_ms must be at least 1")
        if not self.dead_letter_suffix:
            raise ConsumerConfigError("dead_letter_suffix must not be empty")
