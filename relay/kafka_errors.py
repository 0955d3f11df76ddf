"""What a Kafka client error means to the relay: classify(exc) -> PublishFailed.

aiokafka's own `retriable` verdict, refined: a producer that must be replaced (fatal),
the transport's failures (never charged to rows), and a topic's (charged to its rows).
"""

from __future__ import annotations

import asyncio

from aiokafka import errors as kafka_errors

from relay.errors import PublishFailed

# The producer instance is unusable after these; a new one (new producer id) is needed.
_FATAL = (
    kafka_errors.ProducerClosed,
    kafka_errors.OutOfOrderSequenceNumber,
    kafka_errors.ProducerFenced,
    kafka_errors.IllegalStateError,
)

# aiokafka marks a batch that expired while the broker was away (KafkaTimeoutError) as
# not retriable; for the relay it is the broker being unreachable, which is.
_TRANSPORT = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError)
# Retriable, but about one topic: charged to its rows (with backoff, then parked) so that a
# missing topic cannot hold a whole shard back.
_TOPIC_LEVEL = (kafka_errors.UnknownTopicOrPartitionError, kafka_errors.NotEnoughReplicasError)
SIZE_ERRORS = (kafka_errors.MessageSizeTooLargeError, kafka_errors.RecordListTooLargeError)


def classify(exc: BaseException) -> PublishFailed:
    """Kafka client errors -> PublishFailed with aiokafka's own `retriable` verdict."""
    if isinstance(exc, PublishFailed):
        return exc
    name = type(exc).__name__
    text = f"{name}: {exc}".strip().rstrip(":")
    if isinstance(exc, _FATAL):
        return PublishFailed(text, retriable=True, fatal=True)
    if isinstance(exc, _TRANSPORT):
        return PublishFailed(text, retriable=True)
    if isinstance(exc, _TOPIC_LEVEL):
        return PublishFailed(text, retriable=True, transport=False)
    if isinstance(exc, kafka_errors.KafkaError):
        return PublishFailed(text, retriable=bool(getattr(exc, "retriable", False)))
    if isinstance(exc, asyncio.TimeoutError | OSError):
        return PublishFailed(text, retriable=True)
    return PublishFailed(text, retriable=False)
