"""`outbox-relay` whose Kafka producer breaks on cue: the fault hook of the test of a
producer that cannot be started again (tests/acceptance/test_relay_faults.py).

Once the file named by BROKEN_PRODUCER_FILE exists, every send fails as a fenced
producer's does (ProducerFenced: fatal, so the relay replaces the producer), and every
start fails as on a broker that refuses the relay's principal the idempotent producer
(ClusterAuthorizationFailed: no retry can mend it). Both errors go through the
transport's own classify; everything else is the real relay on the real broker.

    python -m tests.support.broken_producer_relay run    # with OUTBOX_* as for outbox-relay
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from aiokafka import errors as kafka_errors

from relay import cli
from relay.transport.kafka import KafkaPublisher, classify
from relay.transport.protocol import Outcome
from relay.transport.records import OutgoingRecord

ARMED = Path(os.environ["BROKEN_PRODUCER_FILE"])
_publish, _start = KafkaPublisher.publish, KafkaPublisher.start


def armed() -> bool:
    return ARMED.exists()  # a stat per send: cheap next to a send, and only in this test


async def publish(self: KafkaPublisher, records: Sequence[OutgoingRecord]) -> list[Outcome]:
    if armed():
        return [classify(kafka_errors.ProducerFenced()) for _ in records]
    return await _publish(self, records)


async def start(self: KafkaPublisher) -> None:
    if armed():
        raise classify(kafka_errors.ClusterAuthorizationFailedError())
    await _start(self)


KafkaPublisher.publish = publish  # type: ignore[method-assign]
KafkaPublisher.start = start  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
