"""The dead-letter topic: where a record goes that can never be applied (undecodable, or
its handler kept failing), with where it came from and the error in its headers.

When the dead-letter topic itself can never take the record (too large with its headers,
an invalid topic name, not authorized, or any other refusal Kafka calls final), the record
is kept in consumer_dead_letters, in the consumer's own database, and its partition moves
on; a metric
(outbox_consumer_dead_letters_kept) and an error line say so. A dead-letter send that
fails otherwise (Kafka away) is retried; while it keeps failing with Kafka otherwise
reachable, its partition is stuck and /healthz says so (stuck()).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidTopicError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
)

from consumer_lib.errors import (
    DeadLetterFailure,
    dead_letter_failure,
    dead_letter_reason,
    kafka_retriable,
)
from consumer_lib.event import SourceRecord
from consumer_lib.settings import ConsumerSettings, kafka_options
from outbox_core.driver_errors import first_line
from outbox_core.kafka_clients import stop_unsent_dropped
from outbox_core.kafka_names import legal_topic
from outbox_core.supervisor import Supervisor

if TYPE_CHECKING:
    from consumer_lib.database import Database
    from consumer_lib.observer import ConsumerObserver

log = logging.getLogger("consumer_lib")

# Kafka not reached at all: an outage, waited out without calling the partition stuck.
_UNREACHABLE = (
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    OSError,
)


@dataclass(frozen=True)
class DeadLetterRow:
    """A consumer_dead_letters row: the record, why it was dead-lettered, and why the
    dead-letter topic (or stream) could not take it."""

    group: str
    topic: str
    partition: int  # -1 for a stream entry
    offset: str  # the Kafka offset, or the stream entry id
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]
    error: BaseException
    refused: BaseException

    def params(self) -> dict[str, Any]:
        # Header values are bytes; kept readable (invalid UTF-8 escaped), as the record's
        # value and key are kept whole.
        headers = [[str(n), v.decode("utf-8", "backslashreplace")] for n, v in self.headers]
        return {
            "consumer_group": self.group,
            "topic": self.topic,
            "source_partition": self.partition,
            "source_offset": self.offset,
            "record_key": self.key,
            "record_value": self.value,
            "headers": json.dumps(headers),
            "error_type": type(self.error).__name__,
            "error": first_line(self.error)[:2000],
            "dead_letter_error": first_line(self.refused)[:2000],
        }


async def keep_in_table(
    database: Database,
    supervisor: Supervisor,
    row: DeadLetterRow,
    reason: DeadLetterFailure,
    *,
    retriable: Callable[[BaseException], bool],
) -> None:
    """Keep the record in consumer_dead_letters (retrying while the database is away) and
    say so: an error line; the caller counts it."""
    await supervisor.retry(
        "keep a dead letter in consumer_dead_letters",
        lambda: database.keep_dead_letter(row),
        retriable,
    )
    log.error(
        "the dead-letter destination can never take this record; kept in "
        "consumer_dead_letters and moving on",
        extra={
            "topic": row.topic,
            "partition": row.partition,
            "offset": row.offset,
            "reason": reason.value,
            "error": first_line(row.error),
            "refused": first_line(row.refused),
        },
    )


def dead_letter_headers(
    record: SourceRecord, error: BaseException, group: str
) -> list[tuple[str, bytes]]:
    """The record's own headers, then where it came from and why it could not be applied."""
    return [
        *(record.headers or ()),
        ("dlt.original.topic", record.topic.encode()),
        ("dlt.original.partition", str(record.partition).encode()),
        ("dlt.original.offset", str(record.offset).encode()),
        ("dlt.consumer.group", group.encode()),
        ("dlt.reason", dead_letter_reason(error).encode()),
        ("dlt.error.type", type(error).__name__.encode()),
        ("dlt.error", first_line(error)[:2000].encode()),
    ]


class DeadLetters:
    """An idempotent producer to the dead-letter topics of the app's topics."""

    def __init__(
        self,
        settings: ConsumerSettings,
        topics: list[str],
        *,
        supervisor: Supervisor,
        observer: ConsumerObserver,
        database: Database,
        transient: Callable[[BaseException], bool],
    ) -> None:
        self.settings = settings
        self.topics = topics
        self._sup = supervisor
        self._observer = observer
        self._database = database
        self._transient = transient
        # Per partition: since when, and with what, its dead-letter send keeps failing.
        self._failing: dict[tuple[str, int], tuple[float, str]] = {}
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            **kafka_options(settings),
        )

    async def start(self) -> None:
        """Start the producer and (create_dead_letter_topics) create the missing topics,
        retrying while Kafka is away."""
        await self._sup.retry("dead-letter producer start", self._producer.start, kafka_retriable)
        if self.settings.create_dead_letter_topics:
            await self._sup.retry("dead-letter topics", self._ensure_topics, kafka_retriable)

    async def stop(self) -> None:
        # Not aiokafka's stop, which waits for the broker while a dead letter is unsent: that
        # record's offset is not committed, so it comes back and is dead-lettered again.
        await stop_unsent_dropped(self._producer)

    def stuck(self, longer_than_s: float) -> str | None:
        """A partition whose dead-letter send has been refused by a reachable broker for
        longer than longer_than_s (a missing topic never created, say): what and since
        when; None when none is. An outage does not count: it is waited out."""
        now = time.monotonic()
        for (topic, partition), (since, error) in sorted(self._failing.items()):
            if now - since > longer_than_s:
                return (
                    f"{topic}[{partition}]: dead-letter send failing for {now - since:.0f}s "
                    f"({error})"
                )
        return None

    async def send(self, record: SourceRecord, error: BaseException) -> None:
        """Put the record on its dead-letter topic (retried while Kafka is away); a
        record that topic can never take goes to consumer_dead_letters."""
        topic = self.settings.dead_letter_topic_for(record.topic)
        headers = dead_letter_headers(record, error, self.settings.group_id)
        where = (record.topic, record.partition)

        async def send() -> None:
            if not legal_topic(topic):  # aiokafka would wait for its metadata, then fail
                raise InvalidTopicError(f"{topic!r} is not a valid Kafka topic name")
            try:
                await self._producer.send_and_wait(
                    topic, record.value, key=record.key, headers=headers
                )
            except Exception as exc:
                if not isinstance(exc, _UNREACHABLE):  # the broker answered, and refused
                    self._failing.setdefault(where, (time.monotonic(), first_line(exc)))
                raise

        try:
            # What is not retried is what dead_letter_failure names (or a bug: raised).
            await self._sup.retry(f"dead-letter to {topic}", send, kafka_retriable)
        except Exception as exc:
            reason = dead_letter_failure(exc)
            if reason is None:
                raise
            row = DeadLetterRow(
                self.settings.group_id,
                record.topic,
                record.partition,
                str(record.offset),
                record.key,
                record.value,
                list(record.headers or ()),
                error,
                exc,
            )
            await keep_in_table(self._database, self._sup, row, reason, retriable=self._transient)
            self._observer.dead_letter_kept(record.topic, reason.value)
            return
        finally:
            self._failing.pop(where, None)
        self._observer.dead_lettered(record.topic)
        log.error(
            "record dead-lettered",
            extra={
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "to": topic,
                "error": first_line(error),
            },
        )

    async def _ensure_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.errors import TopicAlreadyExistsError

        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.settings.bootstrap_servers, **kafka_options(self.settings)
        )
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            names = {self.settings.dead_letter_topic_for(t) for t in self.topics}
            invalid = sorted(n for n in names if not legal_topic(n))
            if invalid:
                log.error(
                    "dead-letter topic names Kafka refuses: their dead letters are kept in "
                    "consumer_dead_letters",
                    extra={"topics": invalid},
                )
            wanted = names - existing - set(invalid)
            if wanted:
                brokers = len((await admin.describe_cluster())["brokers"])
                replicas = max(1, min(3, brokers))
                with contextlib.suppress(TopicAlreadyExistsError):
                    await admin.create_topics(
                        [
                            NewTopic(t, num_partitions=1, replication_factor=replicas)
                            for t in sorted(wanted)
                        ]
                    )
                log.info("dead-letter topics created", extra={"topics": sorted(wanted)})
        finally:
            await admin.close()
