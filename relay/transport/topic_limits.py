"""What each topic accepts: its max.message.bytes as the broker says, capped by the
producer's max_request_size. That is the largest record batch the broker takes, and so
the largest record: the relay builds batches up to it, and refuses only a record larger
than it.

Read beside the cycle (DescribeConfigs, in a task of its own), cached, and read again
after a size error or, where it could not be read (no DescribeConfigs permission, the
admin request failed), after RETRY_READ_S. A cycle never waits for it: while a topic's
limit is unknown, its records go in batches of FALLBACK_BATCH_BYTES, one larger than that
in a batch of its own, and none is refused for a size the relay only guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

log = logging.getLogger("relay.topics")

MAX_MESSAGE_BYTES = "max.message.bytes"
FALLBACK_BATCH_BYTES = 16_384  # Kafka's batch.size default: safe under any topic's limit
RETRY_READ_S = 60.0  # a limit that could not be read is tried again after this
MAX_TRACKED = 10_000  # topics remembered (rows can name any number of topics)


class TopicLimits:
    def __init__(self, admin: Callable[[], AIOKafkaAdminClient], ceiling: int) -> None:
        """admin: makes an unstarted admin client; ceiling: the producer's
        max_request_size (no batch is larger, whatever the topic allows)."""
        self._make_admin = admin
        self._admin: AIOKafkaAdminClient | None = None
        self._ceiling = ceiling
        self._known: dict[str, int] = {}
        self._unread: dict[str, float] = {}  # topic -> when to try reading it again
        self._wanted: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def limit(self, topic: str) -> int | None:
        """The largest record batch the topic takes, or None while it is not known (a read
        is then under way or due)."""
        known = self._known.get(topic)
        if known is not None:
            return known
        if self._unread.get(topic, 0.0) <= time.monotonic():
            self._want(topic)
        return None

    async def read(self, timeout_s: float) -> None:
        """Wait for the read under way, at most timeout_s."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout_s)

    def forget(self, topic: str) -> None:
        """After a size error: read the topic's limit again."""
        self._known.pop(topic, None)
        self._unread.pop(topic, None)

    def _want(self, topic: str) -> None:
        self._unread[topic] = time.monotonic() + RETRY_READ_S  # one read at a time
        self._wanted.add(topic)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._supervised(), name="kafka topic limits")

    async def _supervised(self) -> None:
        while self._wanted:
            topics, self._wanted = self._wanted, set()
            try:
                self._remember(await self._read(topics))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # permissions, or the broker away
                log.warning(
                    "cannot read topic limits; records of these topics go in small batches, "
                    "a larger one alone, until they are read",
                    extra={"topics": sorted(topics), "error": f"{type(exc).__name__}: {exc}"},
                )
                self._remember({}, unread=topics)

    def _remember(self, found: dict[str, int], unread: Iterable[str] = ()) -> None:
        if len(self._known) + len(found) > MAX_TRACKED:
            self._known.clear()
        if len(self._unread) > MAX_TRACKED:
            self._unread.clear()
        self._known.update(found)
        for topic in found:
            self._unread.pop(topic, None)
        retry_at = time.monotonic() + RETRY_READ_S
        for topic in unread:
            self._unread[topic] = retry_at

    async def _read(self, topics: set[str]) -> dict[str, int]:
        if self._admin is None:
            admin = self._make_admin()
            try:
                await admin.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await admin.close()
                raise
            self._admin = admin
        responses = await self._admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, t, configs={MAX_MESSAGE_BYTES: None})
                for t in sorted(topics)
            ]
        )
        found: dict[str, int] = {}
        for response in responses:
            for error_code, _msg, _kind, name, entries in _resources(response):
                for entry in entries if error_code == 0 else ():
                    if entry[0] == MAX_MESSAGE_BYTES and str(entry[1]).isdigit():
                        found[name] = min(int(entry[1]), self._ceiling)
        unread = topics - found.keys()  # refused per topic (missing, not authorized)
        if unread:
            log.warning(
                "cannot read topic limits; records of these topics go in small batches, "
                "a larger one alone, until they are read",
                extra={"topics": sorted(unread), "error": "refused for these topics"},
            )
            self._remember({}, unread=unread)
        return found

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await admin.close()
            except Exception as exc:
                log.debug("admin client close failed", extra={"error": str(exc)})


def _resources(response: Any) -> list[tuple[Any, ...]]:
    return list(getattr(response, "resources", []))
