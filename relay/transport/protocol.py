"""The one role every transport plays (Kafka, Redis Streams, the in-memory double): the
Publisher protocol, and what it reports per record.

A publisher sends what it is given and reports, per record and in order, one of:

- ACKED: stored by the transport (Kafka's ack, Redis' EXEC reply);
- a PublishFailed with its FailureReason (transport/errors.py);
- HELD: not sent by this call, for a reason of the transport's own (a Kafka key whose
  records would span two record batches). No failure: its row stays pending, uncharged.

It decides nothing about which rows may go out (that is relay/pipeline/ordering.py); it
only keeps the transport's side of per-key order: a key's records of one call are stored
in the order given, and nothing later of a key is stored after an earlier record of that
key failed or was held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from relay.transport.errors import PublishFailed
from relay.transport.records import OutgoingRecord


class Acked:
    """The transport stored the record."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ACKED"


class Held:
    """The record was not sent by this call, and nothing failed: the next claim sends it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HELD"


ACKED = Acked()
HELD = Held()
Outcome = Acked | Held | PublishFailed


class Publisher(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def recreate(self) -> None:
        """Replace a producer broken by a fatal error (not the process)."""
        ...

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        """Send the records, wait for the transport's answers, and report one Outcome per
        record, in order. Raises PublishFailed only when nothing could be tried at all (the
        producer is not started)."""
        ...
