"""The two sides that produce to Kafka judge its errors from one table
(outbox_core/kafka_faults.py): the relay's publisher (relay/transport/kafka.py, classify)
and a consumer's dead-letter producer (consumer_lib/errors.py). Where they give the same
error different verdicts, it is on purpose, listed here and explained at both entries."""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

import pytest
from aiokafka import errors as kafka_errors

from consumer_lib.errors import (
    _NEVER_TAKEN,
    DeadLetterFailure,
    dead_letter_failure,
    kafka_retriable,
)
from outbox_core.kafka_faults import _FAULTS, KafkaFault, fault_of
from relay.transport.errors import FailureReason
from relay.transport.kafka import _REASONS, classify

ROOT = Path(__file__).resolve().parents[2]

# The faults the two sides judge differently, each with its reason at both entries
# (relay.transport.kafka._REASONS, consumer_lib.errors._NEVER_TAKEN). A new difference
# fails the walk below until it is explained and listed; a difference mended fails it too.
DIFFERS_ON_PURPOSE = {KafkaFault.TOPIC_DENIED}

# Errors the table does not name: judged by aiokafka's own `retriable`.
UNNAMED = [
    kafka_errors.NotLeaderForPartitionError(),
    kafka_errors.RequestTimedOutError(),
    kafka_errors.NodeNotReadyError(),
    kafka_errors.CorruptRecordException(),
    kafka_errors.PolicyViolationError(),
    kafka_errors.UnrecognizedBrokerVersion(),
    kafka_errors.KafkaError(),
]
NAMED = [kind() for kinds, _fault in _FAULTS for kind in kinds]


def relay_retries(error: BaseException) -> bool:
    return classify(error).retriable


def consumer_retries(error: BaseException) -> bool:
    """Whether a dead-letter send that failed with error is tried again; what is not, is
    kept in consumer_dead_letters when dead_letter_failure names it (else raised)."""
    return kafka_retriable(error)


@pytest.mark.parametrize("error", NAMED + UNNAMED, ids=lambda e: type(e).__name__)
def test_both_sides_give_an_error_the_same_verdict_unless_listed(error: BaseException) -> None:
    fault = fault_of(error)
    assert fault is not None
    differs = relay_retries(error) != consumer_retries(error)
    assert differs == (fault in DIFFERS_ON_PURPOSE), (fault, relay_retries(error))
    # What a consumer does not retry is a dead letter it keeps, never an error it raises.
    assert (dead_letter_failure(error) is None) == consumer_retries(error)


def test_every_fault_has_a_verdict_on_each_side() -> None:
    assert set(_REASONS) == set(KafkaFault)
    assert set(_NEVER_TAKEN) == {f for f in KafkaFault if not f.retriable}
    assert {fault for _kinds, fault in _FAULTS} | {KafkaFault.RETRIABLE, KafkaFault.REFUSED} == set(
        KafkaFault
    )


def comment_above(path: Path, entry: str) -> str:
    """The comment lines right above the line that starts with entry."""
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(entry))
    above = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("#"):
            break
        above.append(line.strip().lstrip("# "))
    return " ".join(reversed(above))


@pytest.mark.parametrize("fault", sorted(DIFFERS_ON_PURPOSE, key=attrgetter("name")))
def test_each_difference_is_explained_at_both_entries(fault: KafkaFault) -> None:
    relay_side = comment_above(ROOT / "relay/transport/kafka.py", f"KafkaFault.{fault.name}:")
    consumer_side = comment_above(ROOT / "consumer_lib/errors.py", f"KafkaFault.{fault.name}:")
    assert "Differs on purpose from consumer_lib.errors" in relay_side
    assert "Differs on purpose from relay.transport.kafka" in consumer_side


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (kafka_errors.KafkaTimeoutError(), KafkaFault.TIMEOUT),
        (TimeoutError(), KafkaFault.TIMEOUT),
        (ConnectionResetError("reset"), KafkaFault.UNREACHABLE),
        (kafka_errors.KafkaConnectionError(), KafkaFault.UNREACHABLE),
        (kafka_errors.RecordTooLargeError(), KafkaFault.TOO_LARGE),
        (kafka_errors.NotLeaderForPartitionError(), KafkaFault.RETRIABLE),
        (kafka_errors.CorruptRecordException(), KafkaFault.REFUSED),
        (kafka_errors.ClusterAuthorizationFailedError(), KafkaFault.CLUSTER_DENIED),
        (kafka_errors.IllegalOperation("not in transaction"), KafkaFault.NOT_IN_TRANSACTION),
    ],
    ids=lambda v: type(v).__name__,
)
def test_errors_are_sorted_by_class(error: BaseException, fault: KafkaFault) -> None:
    assert fault_of(error) is fault


def test_a_send_refused_outside_a_transaction_is_never_charged_to_its_row() -> None:
    """aiokafka refuses a send once the producer's transaction failed (another record's
    error, or a fence): the record was never sent, so its row is held, not parked."""
    error = classify(kafka_errors.IllegalOperation("Can't send messages while not in transaction"))
    assert error.reason is FailureReason.TRANSACTION_ABORTED
    assert error.retriable
    assert not error.charged


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyError("k"), RuntimeError("x")], ids=repr)
def test_an_error_that_is_not_kafkas_is_no_fault_and_never_retried(error: Exception) -> None:
    assert fault_of(error) is None
    assert classify(error).reason is FailureReason.REFUSED
    assert not kafka_retriable(error)
    assert dead_letter_failure(error) is None  # raised, never kept as a dead letter


def test_a_refusal_kafka_calls_final_is_kept_by_a_consumer() -> None:
    assert dead_letter_failure(kafka_errors.PolicyViolationError()) is DeadLetterFailure.REFUSED
    assert dead_letter_failure(kafka_errors.ClusterAuthorizationFailedError()) is (
        DeadLetterFailure.NOT_AUTHORIZED
    )
