"""Every error consumer_lib raises derives from ConsumerError, a branch of the project's
root (outbox_core.errors.OutboxError); `retriable` tells whether trying again later can
succeed. is_transient() decides it for whatever a record's transaction raised."""

from __future__ import annotations

from aiokafka.errors import KafkaError

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
    """A database or network failure that a later retry may get past (not the record's fault).

    TransientError, ConnectionError and TimeoutError are; a driver's error (psycopg, its
    pool, sqlite3, SQLAlchemy's wrappers and verdicts) is when outbox_core's one table says
    so (driver_errors.classify); ours, the executors' translations included, carry it in
    `retriable`. Anything else a handler raises is the record's failure.
    """
    if isinstance(exc, TransientError | ConnectionError | TimeoutError):
        return True
    return classify(exc).retriable


def kafka_retriable(exc: BaseException) -> bool:
    """A Kafka client call worth repeating (start, dead-letter send, topic creation)."""
    return isinstance(exc, KafkaError | OSError)
