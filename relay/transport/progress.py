"""The progress topic of Kafka transactions (kafka_transactions): each shard's transaction
carries one progress record saying which outbox rows it covers, and a shard's next owner
reads the last one before its first claim (relay.transport.transactions).

The topic is compacted (key: the shard), so it keeps at least each shard's last record.
It is created at start-up when missing and refused when it exists uncompacted: a delete
policy could drop the one record a takeover needs.

One reader per relay, not one per takeover: a consumer assigned every partition of the
topic, read_committed, kept positioned between takeovers, so a takeover reads only what
was written since the last one (a relay taking 64 shards at start-up reads the topic
once, not 64 times). Reading "up to the end" means up to the high watermark taken after
the new owner's producer was initialised (every record of the previous owner is below
it), read_committed: past any transaction still open there (another shard's), which ends
within the transaction timeout. The last stable offset alone would stop before records
committed after an open transaction began.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from outbox_core.kafka_clients import stop_consumer
from outbox_core.kafka_security import KafkaSecurity
from relay.errors import RelayConfigError
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import classify
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.records import OutgoingRecord

log = logging.getLogger("relay.transactions")

CLEANUP_POLICY = "cleanup.policy"
# Compaction works on closed segments only, and a relay writes a record per transaction
# (tens a second): small segments, rolled every ten minutes and cleaned once a tenth of
# the log is dirty, keep what a relay reads from the beginning at start-up to a few MiB.
TOPIC_CONFIGS = {
    CLEANUP_POLICY: "compact",
    "segment.ms": str(600_000),
    "segment.bytes": str(16 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.1",
}
PROGRESS_VERSION = 1


class ProgressTopicRefused(RelayConfigError):
    """The progress topic exists and is not compacted, or the broker refuses it (exit 2)."""


@dataclass(frozen=True)
class Progress:
    """One transaction's progress record: the shard, the lease token its owner held, and
    the outbox row ids Kafka has (those of the transaction, and those of earlier ones
    whose settle was not confirmed when it was written)."""

    shard: int
    token: int
    ids: tuple[int, ...]

    def record(self, topic: str) -> OutgoingRecord:
        value = {"v": PROGRESS_VERSION, "shard": self.shard, "token": self.token}
        body = json.dumps({**value, "ids": list(self.ids)}, separators=(",", ":"))
        return OutgoingRecord(topic, str(self.shard).encode(), body.encode(), [])

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Progress | None:
        """The record's progress; None for anything that is not one of ours (a record
        written to the topic by someone else must not stop a takeover)."""
        try:
            body = json.loads(value or b"")
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict) or body.get("v") != PROGRESS_VERSION:
            return None
        shard, token, ids = body.get("shard"), body.get("token"), body.get("ids")
        if type(shard) is not int or type(token) is not int or not isinstance(ids, list):
            return None
        if not all(type(i) is int for i in ids) or key != str(shard).encode():
            return None
        return cls(shard, token, tuple(ids))


class ProgressTopic:
    """Creates or checks the topic, and reads each shard's last progress record."""

    def __init__(self, settings: KafkaSettings, security: KafkaSecurity) -> None:
        self._settings = settings
        self._security = security
        self.topic = settings.progress_topic
        self._reader: AIOKafkaConsumer | None = None
        self._ends: AIOKafkaConsumer | None = None  # read_uncommitted: the high watermarks
        self._partitions: list[TopicPartition] = []
        self._last: dict[int, Progress] = {}
        self._lock = asyncio.Lock()

    def _options(self) -> dict[str, Any]:
        s = self._settings
        return {
            "bootstrap_servers": s.bootstrap_servers,
            "request_timeout_ms": s.request_timeout_ms,
            **self._security.client_options(),
        }

    async def start(self) -> None:
        """Create or check the topic, then start the reader at its beginning."""
        try:
            partitions = await self._start_readers(await self._ensure())
        except (RelayConfigError, asyncio.CancelledError):
            await self.stop()
            raise
        except Exception as exc:
            await self.stop()
            raise classify(exc) from exc
        self._partitions = partitions

    async def _ensure(self) -> list[int]:
        """The topic's partitions, once it exists and is compacted."""
        admin = AIOKafkaAdminClient(client_id="outbox-relay-progress-admin", **self._options())
        await admin.start()
        try:
            if self.topic not in set(await admin.list_topics()):
                brokers = len((await admin.describe_cluster())["brokers"])
                topic = NewTopic(
                    self.topic,
                    num_partitions=1,
                    replication_factor=max(1, min(3, brokers)),
                    topic_configs=TOPIC_CONFIGS,
                )
                with contextlib.suppress(TopicAlreadyExistsError):
                    response = await admin.create_topics([topic])
                    _refused_creation(self.topic, response)
                    log.info("progress topic created", extra={"topic": self.topic})
            policy = await _until_known(
                self.topic, lambda: _cleanup_policy(admin, self.topic), self._known_wait_s()
            )
            if "compact" not in policy.split(","):
                raise ProgressTopicRefused(
                    f"kafka_progress_topic {self.topic!r} has cleanup.policy={policy}; it "
                    "must be compact (a delete policy can drop the record a shard's next "
                    "owner needs): alter the topic or name another"
                )
            return await _until_known(
                self.topic, lambda: _partitions(admin, self.topic), self._known_wait_s()
            )
        finally:
            with contextlib.suppress(Exception):
                await admin.close()

    def _known_wait_s(self) -> float:
        return self._settings.request_timeout_ms / 1000

    async def _start_readers(self, found: list[int]) -> list[TopicPartition]:
        options = {**self._options(), "enable_auto_commit": False, "group_id": None}
        reader = self._reader = AIOKafkaConsumer(
            client_id="outbox-relay-progress", isolation_level="read_committed", **options
        )
        ends = self._ends = AIOKafkaConsumer(client_id="outbox-relay-progress-ends", **options)
        await reader.start()
        await ends.start()
        partitions = [TopicPartition(self.topic, p) for p in sorted(found)]
        reader.assign(partitions)
        await reader.seek_to_beginning(*partitions)
        return partitions

    async def stop(self) -> None:
        for consumer in (self._reader, self._ends):
            if consumer is not None:
                with contextlib.suppress(Exception):
                    await stop_consumer(consumer)
        self._reader = self._ends = None

    async def last(self, shards: Iterable[int]) -> dict[int, Progress]:
        """Each shard's last committed progress record (those with none are left out),
        read up to everything written before this call."""
        async with self._lock:
            await self._catch_up()
            return {s: self._last[s] for s in shards if s in self._last}

    async def _catch_up(self) -> None:
        reader, ends = self._reader, self._ends
        if reader is None or ends is None:
            raise PublishFailed(FailureReason.PRODUCER_BROKEN, "progress reader not started")
        s = self._settings
        # The reader waits at most a transaction timeout behind an open transaction.
        limit_s = (s.request_timeout_ms + s.transaction_timeout_ms) / 1000
        deadline = time.monotonic() + limit_s
        try:
            high = await ends.end_offsets(self._partitions)
            while await _behind(reader, high):
                if time.monotonic() > deadline:
                    raise PublishFailed(
                        FailureReason.TIMEOUT,
                        f"progress topic {self.topic} not read to its end within {limit_s:.0f}s",
                    )
                batches = await reader.getmany(*self._partitions, timeout_ms=200)
                for records in batches.values():
                    for record in records:
                        progress = Progress.decode(record.key, record.value)
                        if progress is None:
                            log.warning(
                                "a record on the progress topic is not a progress record; skipped",
                                extra={"topic": self.topic, "offset": record.offset},
                            )
                            continue
                        self._last[progress.shard] = progress
        except PublishFailed:
            raise
        except Exception as exc:
            raise classify(exc) from exc


async def _behind(reader: AIOKafkaConsumer, high: dict[TopicPartition, int]) -> bool:
    for tp, end in high.items():
        if await reader.position(tp) < end:
            return True
    return False


def _refused_creation(topic: str, response: Any) -> None:
    for entry in getattr(response, "topic_errors", []):
        name, code = entry[0], entry[1]
        if name == topic and code not in (0, 36):  # 36: the topic exists already
            raise ProgressTopicRefused(
                f"the broker refused to create progress topic {topic!r} (error code {code})"
            )


# A topic just created can be unknown for a moment to the broker that answers next (its
# metadata not there yet): asked again every KNOWN_POLL_S, up to the request timeout.
UNKNOWN_TOPIC = UnknownTopicOrPartitionError.errno
KNOWN_POLL_S = 0.1
_AUTHORIZATION = {TopicAuthorizationFailedError.errno, ClusterAuthorizationFailedError.errno}


T = TypeVar("T")


class _Unknown(Exception):
    """The broker does not know the topic (yet)."""


async def _until_known(topic: str, ask: Callable[[], Awaitable[T]], wait_s: float) -> T:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await ask()
        except _Unknown:
            if time.monotonic() >= deadline:
                raise ProgressTopicRefused(
                    f"progress topic {topic!r} is still unknown to the broker {wait_s:g} s "
                    "after it was found or created"
                ) from None
        await asyncio.sleep(KNOWN_POLL_S)


async def _partitions(admin: AIOKafkaAdminClient, topic: str) -> list[int]:
    for described in await admin.describe_topics([topic]):
        if described.get("topic") != topic:
            continue
        code = described.get("error_code")
        if code == UNKNOWN_TOPIC or (not code and not described.get("partitions")):
            raise _Unknown(topic)
        if not code:
            return [int(p["partition"]) for p in described["partitions"]]
        raise ProgressTopicRefused(f"cannot describe progress topic {topic!r} (error code {code})")
    raise ProgressTopicRefused(f"cannot describe progress topic {topic!r}")


async def _cleanup_policy(admin: AIOKafkaAdminClient, topic: str) -> str:
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={CLEANUP_POLICY: None})]
    )
    for response in responses:
        for resource in getattr(response, "resources", []):
            error_code, _msg, _kind, _name, entries = resource
            if error_code == UNKNOWN_TOPIC:
                raise _Unknown(topic)
            if error_code:
                why = (
                    "the relay needs DescribeConfigs on it"
                    if error_code in _AUTHORIZATION
                    else "the broker refused to describe it"
                )
                raise ProgressTopicRefused(
                    f"cannot read progress topic {topic!r}'s configuration "
                    f"(error code {error_code}): {why}"
                )
            for entry in entries:
                if entry[0] == CLEANUP_POLICY:
                    return str(entry[1])
    return "delete"  # Kafka's default
