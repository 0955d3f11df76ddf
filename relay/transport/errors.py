"""What a failed send means to the relay, whatever the transport: a `FailureReason`, set
by the transport's own classify (kafka.classify, redis_streams.classify) and never read
back out of a message.

A reason decides everything the relay does with a failure:

- `retriable`: whether the row may succeed later (backoff) or is parked at once;
- `transport`: the cluster or the connection failed, not this record. When nothing of a
  claim got through and every failure is the transport's, the transport is away: nothing
  is charged and the loop backs off (TransportUnavailable);
- `fatal`: the producer itself is broken and must be replaced; its rows are not charged;
- `charged`: whether the failure counts toward the row's max_attempts. An uncharged
  failure (the topic's ACL, its in-sync replicas: not the row's fault) still backs the
  row off, persisted, so its key waits behind it and the claim moves past it, but it
  never parks the row, however long it lasts;
- `label`: the `reason` label of outbox_relay_publish_failures_total, a bounded set.
"""

from __future__ import annotations

from enum import Enum

from relay.errors import RelayError


class FailureReason(Enum):
    #                    label               retriable  transport  fatal  charged
    TOO_LARGE = ("RecordTooLarge", False, False, False, True)  # alone, refused for its size
    REFUSED = ("Refused", False, False, False, True)  # refused for good: invalid, wrong type
    MALFORMED_ROW = ("MalformedRow", False, False, False, True)  # the row cannot become a record
    UNKNOWN_TOPIC = ("UnknownTopic", True, False, False, True)  # the topic's problem: charged
    TOPIC_DENIED = ("TopicDenied", True, False, False, False)  # not authorized (an ACL)
    TOPIC_UNAVAILABLE = ("TopicUnavailable", True, False, False, False)  # too few replicas
    TIMEOUT = ("Timeout", True, True, False, True)
    UNREACHABLE = ("Unreachable", True, True, False, True)  # connection refused, reset, DNS
    RETRIABLE = ("Retriable", True, True, False, True)  # another passing broker condition
    PRODUCER_BROKEN = ("ProducerBroken", True, True, True, True)  # fenced, closed, out of sequence
    NO_ACK = ("NoAck", True, True, True, True)  # never answered: its producer is replaced
    # The broker refused a batch of several records for its size: none of them is known to
    # be too large. They go out again in smaller batches; the refusal put the producer's
    # sequence numbers out of step with the broker's, so it is replaced first.
    BATCH_TOO_LARGE = ("BatchTooLarge", True, False, True, False)
    # Kafka transactions (kafka_transactions). Another producer took the shard's
    # transactional id: its lease moved. Nothing of the transaction is visible and the
    # rows are the new owner's, so they are not charged; the shard is dropped.
    FENCED = ("Fenced", True, False, True, False)
    # The shard's transaction was aborted for no fault of these rows: its progress record
    # was refused, or another record's error ended it before these were sent. (A commit
    # without an answer is no failure of the rows: they are held, and the progress topic
    # tells, before the shard's next claim, whether it happened.)
    TRANSACTION_ABORTED = ("TransactionAborted", True, True, False, False)

    def __init__(
        self, label: str, retriable: bool, transport: bool, fatal: bool, charged: bool
    ) -> None:
        self.label = label
        self.retriable = retriable
        self.transport = transport
        self.fatal = fatal
        self.charged = charged


class PublishFailed(RelayError):
    """The transport refused or could not take a record, for `reason`; the message (kept
    as the row's last_error) is for people only."""

    def __init__(self, reason: FailureReason, message: str = "") -> None:
        super().__init__(message or reason.label)
        self.reason = reason
        self.retriable = reason.retriable

    @property
    def transport(self) -> bool:
        return self.reason.transport

    @property
    def fatal(self) -> bool:
        return self.reason.fatal

    @property
    def charged(self) -> bool:
        return self.reason.charged


class TransportUnavailable(RelayError):
    """Every send of a claim failed with a transport error (Kafka or Redis away): nothing
    was settled, and the loop backs off instead of charging the rows."""

    retriable = True

    def __init__(self, error: PublishFailed) -> None:
        super().__init__(str(error))
        self.error = error
