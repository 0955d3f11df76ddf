"""What a Kafka client error is, for every part that produces to Kafka: the relay's
publisher (relay.transport.kafka) and a consumer's dead-letter producer
(consumer_lib.errors). One table by class sorts aiokafka's errors into faults, and each
fault carries the verdict both sides take unless they say otherwise: whether trying again
later may succeed.

Each side turns a fault into its own terms (the relay a FailureReason, a consumer a
DeadLetterFailure or a retry), and a side that gives a fault another verdict says so at
its entry, with the reason. Today one fault differs: TOPIC_DENIED (see its comment).
"""

from __future__ import annotations

from enum import Enum

from aiokafka import errors as kafka_errors


class KafkaFault(Enum):
    #                    label                retriable
    # A transactional producer whose id another producer took since (a higher epoch):
    # this one can commit nothing any more; a new producer under the same id can.
    FENCED = ("fenced", True)
    # The producer instance is unusable (fenced, closed, out of sequence); a new one works.
    PRODUCER_BROKEN = ("producer_broken", True)
    # A send to a transactional producer whose transaction failed before it (aborted by
    # an error of another record or of the coordinator, or fenced): the record was never
    # sent, and goes in the next transaction.
    NOT_IN_TRANSACTION = ("not_in_transaction", True)
    TOO_LARGE = ("too_large", False)  # the record (or batch) passes a size limit
    INVALID_TOPIC = ("invalid_topic", False)  # a name Kafka refuses
    # Not authorized for the topic: an ACL, until an operator grants it. Not retriable
    # here, and so for a consumer's dead letters (consumer_lib.errors, _NEVER_TAKEN); the
    # relay retries it (relay.transport.kafka, _REASONS: TOPIC_DENIED), because its event
    # has nowhere else to go, while a dead letter has consumer_dead_letters.
    TOPIC_DENIED = ("topic_denied", False)
    CLUSTER_DENIED = ("cluster_denied", False)  # not authorized for the cluster at all
    UNKNOWN_TOPIC = ("unknown_topic", True)  # missing, or its metadata not there yet
    TOPIC_UNAVAILABLE = ("topic_unavailable", True)  # too few in-sync replicas
    # aiokafka marks a batch that expired while the broker was away (KafkaTimeoutError)
    # as not retriable; it is the broker being unreachable, which is.
    TIMEOUT = ("timeout", True)
    UNREACHABLE = ("unreachable", True)  # connection refused, reset, DNS
    RETRIABLE = ("retriable", True)  # another error aiokafka calls retriable
    REFUSED = ("refused", False)  # another error aiokafka calls not retriable

    def __init__(self, label: str, retriable: bool) -> None:
        self.label = label
        self.retriable = retriable


# By class, most specific first: TimeoutError (asyncio's too) is an OSError as well.
_FAULTS: tuple[tuple[tuple[type[BaseException], ...], KafkaFault], ...] = (
    (
        (
            kafka_errors.ProducerFenced,
            kafka_errors.InvalidProducerEpoch,
            kafka_errors.TransactionCoordinatorFenced,
        ),
        KafkaFault.FENCED,
    ),
    (
        (
            kafka_errors.ProducerClosed,
            kafka_errors.OutOfOrderSequenceNumber,
            kafka_errors.IllegalStateError,
        ),
        KafkaFault.PRODUCER_BROKEN,
    ),
    # aiokafka raises it for a send outside an open transaction, and for a transaction
    # call on a producer without a transactional id (which no caller here makes).
    ((kafka_errors.IllegalOperation,), KafkaFault.NOT_IN_TRANSACTION),
    (
        (
            kafka_errors.MessageSizeTooLargeError,
            kafka_errors.RecordListTooLargeError,
            kafka_errors.RecordTooLargeError,
        ),
        KafkaFault.TOO_LARGE,
    ),
    ((kafka_errors.InvalidTopicError,), KafkaFault.INVALID_TOPIC),
    ((kafka_errors.TopicAuthorizationFailedError,), KafkaFault.TOPIC_DENIED),
    ((kafka_errors.ClusterAuthorizationFailedError,), KafkaFault.CLUSTER_DENIED),
    ((kafka_errors.UnknownTopicOrPartitionError,), KafkaFault.UNKNOWN_TOPIC),
    (
        (kafka_errors.NotEnoughReplicasError, kafka_errors.NotEnoughReplicasAfterAppendError),
        KafkaFault.TOPIC_UNAVAILABLE,
    ),
    ((kafka_errors.KafkaTimeoutError, TimeoutError), KafkaFault.TIMEOUT),
    ((kafka_errors.KafkaConnectionError, OSError), KafkaFault.UNREACHABLE),
)


def fault_of(exc: BaseException) -> KafkaFault | None:
    """The fault of a Kafka client's (or its socket's) error; None for any other error,
    which is no verdict of the broker's: each side decides what a bug of its own costs."""
    for kinds, fault in _FAULTS:
        if isinstance(exc, kinds):
            return fault
    if isinstance(exc, kafka_errors.KafkaError):
        return KafkaFault.RETRIABLE if getattr(exc, "retriable", False) else KafkaFault.REFUSED
    return None
