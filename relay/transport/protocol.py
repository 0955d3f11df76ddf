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

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from relay.store import ClaimedRow
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


# The shards of these leases (shard -> token) the database shows this replica's, live, by
# those tokens.
Holding = Callable[[Mapping[int, int]], Awaitable[set[int]]]


@runtime_checkable
class ShardPublisher(Publisher, Protocol):
    """A publisher that sends a cycle's records in a Kafka transaction with each shard's
    progress (kafka_transactions: relay.transport.transactions). The step asks it,
    before each claim, for the rows Kafka already has that the database has not settled,
    and tells it which settles it confirmed; the pipeline tells it which leases come
    and go."""

    stuck: set[int]  # shards whose last transaction could not be ended

    def taken(self, shard: int, token: int, previous: str | None) -> None:
        """This replica took the shard's lease under `token` from replica `previous`
        (None: free or released)."""
        ...

    async def ready(self, tokens: Mapping[int, int], holding: Holding) -> dict[int, list[int]]:
        """Start what the shards need under these leases (holding: which of them the
        database shows this replica's, by these tokens); per shard, the ids to settle
        before claiming."""
        ...

    async def publish_shards(
        self,
        rows: Sequence[ClaimedRow],
        records: Sequence[OutgoingRecord],
        tokens: Mapping[int, int],
    ) -> list[Outcome]: ...

    def confirm(self, shard: int, ids: Sequence[int], *, recovered: bool = False) -> None: ...

    def unsettled(self, shard: int, ids: Sequence[int]) -> None: ...

    def forget(self, shard: int) -> None: ...
