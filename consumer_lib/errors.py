"""Every error consumer_lib raises derives from ConsumerError, a branch of the project's
root (outbox_core.errors.OutboxError); `retriable` tells whether trying again later can
succeed. is_transient() decides it for whatever a record's transaction raised."""

from __future__ import annotations

import enum

from outbox_core.driver_errors import classify
from outbox_core.errors import OutboxError
from outbox_core.kafka_faults import KafkaFault, fault_of


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


class PoisonReason(enum.Enum):
    """Why a record can never be processed."""

    NOT_UTF8 = "not_utf8"  # a header or the key is not UTF-8
    CONFLICTING_HEADERS = "conflicting_headers"  # an identity header twice, with two values
    INVALID_EVENT_ID = "invalid_event_id"  # an event_id header not a UUID; an empty Debezium id
    INVALID_PAYLOAD = "invalid_payload"  # JSON content that is not JSON; data_base64 not base64
    INVALID_ENVELOPE = "invalid_envelope"  # a structured CloudEvent that is not a JSON object
    MISSING_ATTRIBUTE = "missing_attribute"  # a CloudEvent without a required attribute
    INVALID_ATTRIBUTE = "invalid_attribute"  # a CloudEvents attribute empty or of a wrong type
    NO_EVENT_ID = "no_event_id"  # no event id in any shape (missing_event_id=dead_letter)
    NO_HANDLER = "no_handler"  # no handler for its event type (unhandled=dead_letter)
    UNDECODABLE = "undecodable"  # decoding failed otherwise (JSON nested too deep, say)


class PoisonRecord(ConsumerError):
    """The record can never be processed: it goes to the dead-letter topic. `reason` says
    why (a handler raising it without one: UNDECODABLE)."""

    def __init__(self, message: str, reason: PoisonReason = PoisonReason.UNDECODABLE) -> None:
        super().__init__(message)
        self.reason = reason


HANDLER_FAILED = "handler_failed"


def dead_letter_reason(error: BaseException) -> str:
    """Why a record was dead-lettered, as a value a reader can switch on (the dead letter's
    `dlt.reason`): a poison record's PoisonReason, or handler_failed when its handler kept
    raising until max_attempts."""
    return error.reason.value if isinstance(error, PoisonRecord) else HANDLER_FAILED


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
    REFUSED = (
        "refused"  # refused for good otherwise (Kafka; Redis: no permission, a key of another type)
    )


# Each Kafka fault (outbox_core.kafka_faults: the one table of aiokafka's errors) that is
# not retriable, as the reason a dead-letter topic can never take the record; the faults
# not named here are retried. Every verdict is the fault's own.
_NEVER_TAKEN: dict[KafkaFault, DeadLetterFailure] = {
    KafkaFault.TOO_LARGE: DeadLetterFailure.TOO_LARGE,
    KafkaFault.INVALID_TOPIC: DeadLetterFailure.INVALID_TOPIC,
    # Differs on purpose from relay.transport.kafka (_REASONS: TOPIC_DENIED, retried): a
    # dead letter has a place of its own when its topic refuses it (consumer_dead_letters),
    # and waiting for an ACL would hold its partition's every later record; the relay's
    # event has nowhere else to go, so the relay waits for the grant.
    KafkaFault.TOPIC_DENIED: DeadLetterFailure.NOT_AUTHORIZED,
    KafkaFault.CLUSTER_DENIED: DeadLetterFailure.NOT_AUTHORIZED,
    KafkaFault.REFUSED: DeadLetterFailure.REFUSED,
}


def dead_letter_failure(exc: BaseException) -> DeadLetterFailure | None:
    """The reason a dead-letter send can never succeed; None when a retry may, or when
    the error is not Kafka's (a bug of ours is raised, never kept as a dead letter)."""
    fault = fault_of(exc)
    return None if fault is None else _NEVER_TAKEN.get(fault)


def kafka_retriable(exc: BaseException) -> bool:
    """A Kafka client call worth repeating (start, dead-letter send, topic creation)."""
    fault = fault_of(exc)
    return fault is not None and fault.retriable
