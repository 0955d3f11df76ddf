"""What a failed send means to the relay, whatever the transport: a `FailureReason`, set
by the transport's own classify (kafka.classify, redis_streams.classify) and never read
back out of a message.

A reason decides everything the relay does with a failure:

- `retriable`: whether the row may succeed later (backoff) or is parked at once;
- `transport`: the cluster or the connection failed, not this record. When nothing of a
  claim got through and every failure is the transport's, the transport is away: nothing
  is charged and the loop backs off (TransportUnavailable);
- `fatal`: the producer itself is broken and must be replaced; its rows are not charged;
- `label`: the `reason` label of outbox_relay_publish_failures_total, a bounded set.
"""

from __future__ import annotations

from enum import Enum

from relay.errors import RelayError


class FailureReason(Enum):
    #                    label               retriable  transport  fatal
    TOO_LARGE = ("RecordTooLarge", False, False, False)
    REFUSED = ("Refused", False, False, False)  # refused for good: invalid, wrong type, denied
    MALFORMED_ROW = ("MalformedRow", False, False, False)  # the row cannot become a record
    UNKNOWN_TOPIC = ("UnknownTopic", True, False, False)  # the topic's problem: charged
    TOPIC_UNAVAILABLE = ("TopicUnavailable", True, False, False)  # too few replicas
    TIMEOUT = ("Timeout", True, True, False)
    UNREACHABLE = ("Unreachable", True, True, False)  # connection refused, reset, DNS
    RETRIABLE = ("Retriable", True, True, False)  # another passing broker condition
    PRODUCER_BROKEN = ("ProducerBroken", True, True, True)  # fenced, closed, out of sequence
    NO_ACK = ("NoAck", True, True, True)  # never answered: its producer is replaced

    def __init__(self, label: str, retriable: bool, transport: bool, fatal: bool) -> None:
        self.label = label
        self.retriable = retriable
        self.transport = transport
        self.fatal = fatal


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


class TransportUnavailable(RelayError):
    """Every send of a claim failed with a transport error (Kafka or Redis away): nothing
    was settled, and the loop backs off instead of charging the rows."""

    retriable = True

    def __init__(self, error: PublishFailed) -> None:
        super().__init__(str(error))
        self.error = error
