"""Every error consumer_lib raises derives from ConsumerError, a branch of the project's
root (outbox_core.errors.OutboxError); `retriable` tells whether trying again later can
succeed. is_transient() decides it for whatever a record's transaction raised."""

from __future__ import annotations

import enum

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)

from outbox_core.driver_errors import classify
from outbox_core.errors import OutboxError


class ConsumerError(OutboxError):
    """Root of consumer_lib's errors."""


class ConsumerConfigError(ConsumerError, ValueError):
    """Invalid settings or app definition; the consumer refuses to start."""


class HandlerKindError(ConsumerError, TypeError):
    """A handler registered with an adapter of the other kind: an async handler with
    SqlAlchemySync, or a sync one with SqlAlchemyAsync or PsycopgAsync."""


class TransientError(ConsumerError):
    """Raise (or subclass) from a handler for a failure that should be retried without
    counting against the record's attempts: a dependency that is briefly down."""

    retriable = True


class PoisonRecord(ConsumerError):
    """The record can never be processed: it goes to the dead-letter topic."""


def is_transient(exc: BaseException) -> bool:
    """A database or broker failure that a later retry may get past (not the record's fault).

    TransientError is; a driver's error (psycopg, its pool, sqlite3, SQLAlchemy's wrappers
    and verdicts) is when outbox_core's one table says so (driver_errors.classify); ours,
    the executors' translations included, carry it in `retriable`. Anything else a handler
    raises is the record's failure, its own TimeoutError or ConnectionError included (a
    call of its own that timed out may time out forever: retried without limit, it would
    hold its partition for good).
    """
    if isinstance(exc, TransientError):
        return True
    if isinstance(exc, ConnectionError | TimeoutError):
        return False  # raised by the handler itself: the drivers raise their own types
    return classify(exc).retriable


class DeadLetterFailure(enum.Enum):
    """Why a dead-letter topic can never take a record, however often it is tried."""

    TOO_LARGE = "too_large"  # the record and its dead-letter headers pass a size limit
    INVALID_TOPIC = "invalid_topic"  # the dead-letter topic's name is not a valid one
    NOT_AUTHORIZED = "not_authorized"  # the consumer may not write to it
    REFUSED = "refused"  # a stream Redis refuses to add to (no permission, another type)


_NEVER_TAKEN: tuple[tuple[type[KafkaError], DeadLetterFailure], ...] = (
    (MessageSizeTooLargeError, DeadLetterFailure.TOO_LARGE),
    (RecordTooLargeError, DeadLetterFailure.TOO_LARGE),
    (InvalidTopicError, DeadLetterFailure.INVALID_TOPIC),
    (TopicAuthorizationFailedError, DeadLetterFailure.NOT_AUTHORIZED),
    (ClusterAuthorizationFailedError, DeadLetterFailure.NOT_AUTHORIZED),
)


def dead_letter_failure(exc: BaseException) -> DeadLetterFailure | None:
    """The reason a dead-letter send can never succeed; None when a retry may."""
    for kind, reason in _NEVER_TAKEN:
        if isinstance(exc, kind):
            return reason
    return None


def kafka_retriable(exc: BaseException) -> bool:
    """A Kafka client call worth repeating (start, dead-letter send, topic creation)."""
    return isinstance(exc, KafkaError | OSError)
