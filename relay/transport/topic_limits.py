"""How large a record batch each topic takes: its max.message.bytes, as the broker says.

The broker refuses a record batch as a whole when it is larger than the topic's
max.message.bytes, so the relay builds each topic's batches up to that size: a round trip
carries thousands of events, and no batch is ever refused for its size. Read once per
topic (DescribeConfigs), cached, and read again after a size error. Where it cannot be
read (no DescribeConfigs permission), the relay falls back to Kafka's batch.size default.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

log = logging.getLogger("relay.topics")

MAX_MESSAGE_BYTES = "max.message.bytes"
FALLBACK_BATCH_BYTES = 16_384  # Kafka's batch.size default: safe under any topic's limit
RETRY_READ_S = 60.0  # a limit that could not be read is tried again after this


class TopicLimits:
    def __init__(self, admin: Callable[[], AIOKafkaAdminClient], ceiling: int) -> None:
        """admin: makes an unstarted admin client; ceiling: the producer's
        max_request_size (no batch is larger, whatever the topic allows)."""
        self._make_admin = admin
        self._admin: AIOKafkaAdminClient | None = None
        self._ceiling = ceiling
        self._known: dict[str, int] = {}
        self._guessed: dict[str, float] = {}  # topic -> when to try reading it again
        self._lock = asyncio.Lock()

    def _missing(self, topics: set[str]) -> set[str]:
        now = time.monotonic()
        return {t for t in topics if t not in self._known or self._guessed.get(t, now) < now}

    async def batch_bytes(self, topics: set[str]) -> dict[str, int]:
        """The record batch size to build for each topic."""
        if self._missing(topics):
            async with self._lock:
                missing = self._missing(topics)
                if missing:
                    self._known.update(await self._read(missing))
        return {t: self._known[t] for t in topics}

    def forget(self, topic: str) -> None:
        """After a size error: read the topic's limit again before its next batch."""
        self._known.pop(topic, None)

    async def _read(self, topics: set[str]) -> dict[str, int]:
        found = dict.fromkeys(topics, FALLBACK_BATCH_BYTES)
        retry_at = time.monotonic() + RETRY_READ_S
        for topic in topics:
            self._guessed[topic] = retry_at
        try:
            if self._admin is None:
                admin = self._make_admin()
                await admin.start()
                self._admin = admin
            responses = await self._admin.describe_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, t, configs={MAX_MESSAGE_BYTES: None})
                    for t in sorted(topics)
                ]
            )
        except Exception as exc:  # permissions, or the broker away: the safe size
            log.warning(
                "cannot read topic limits; batches of the default size",
                extra={"topics": sorted(topics), "error": f"{type(exc).__name__}: {exc}"},
            )
            return found
        for response in responses:
            for error_code, _msg, _kind, name, entries in _resources(response):
                for entry in entries if error_code == 0 else ():
                    if entry[0] == MAX_MESSAGE_BYTES and str(entry[1]).isdigit():
                        found[name] = min(int(entry[1]), self._ceiling)
                        self._guessed.pop(name, None)
        return found

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await admin.close()
            except Exception as exc:
                log.debug("admin client close failed", extra={"error": str(exc)})


def _resources(response: Any) -> list[tuple[Any, ...]]:
    return list(getattr(response, "resources", []))
