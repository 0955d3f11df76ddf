"""The dead-letter topic: where a record goes that can never be applied (undecodable, or
its handler kept failing), with where it came from and the error in its headers."""

from __future__ import annotations

import contextlib
import logging

from aiokafka import AIOKafkaProducer, ConsumerRecord

from consumer_lib.errors import kafka_retriable
from consumer_lib.observer import ConsumerObserver
from consumer_lib.settings import ConsumerSettings, kafka_options
from outbox_core.driver_errors import first_line
from outbox_core.supervisor import Supervisor

log = logging.getLogger("consumer_lib")


def dead_letter_headers(
    record: ConsumerRecord, error: BaseException, group: str
) -> list[tuple[str, bytes]]:
    """The record's own headers, then where it came from and why it could not be applied."""
    return [
        *(record.headers or ()),
        ("dlt.original.topic", record.topic.encode()),
        ("dlt.original.partition", str(record.partition).encode()),
        ("dlt.original.offset", str(record.offset).encode()),
        ("dlt.consumer.group", group.encode()),
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
    ) -> None:
        self.settings = settings
        self.topics = topics
        self._sup = supervisor
        self._observer = observer
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
        await self._producer.stop()

    async def send(self, record: ConsumerRecord, error: BaseException) -> None:
        """Put the record on its dead-letter topic (retried until Kafka takes it)."""
        topic = self.settings.dead_letter_topic_for(record.topic)
        headers = dead_letter_headers(record, error, self.settings.group_id)

        async def send() -> None:
            await self._producer.send_and_wait(topic, record.value, key=record.key, headers=headers)

        await self._sup.retry(f"dead-letter to {topic}", send, kafka_retriable)
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
            wanted = {self.settings.dead_letter_topic_for(t) for t in self.topics} - existing
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
