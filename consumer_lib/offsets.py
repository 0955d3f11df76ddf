"""Offsets follow the database: a record's offset reaches Kafka only once its transaction
has committed, and a partition being revoked first commits what is done, then goes (its
records still failing are abandoned, not retried, while it does)."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from consumer_lib.observer import ConsumerObserver
from outbox_core.driver_errors import first_line

log = logging.getLogger("consumer_lib")


class Offsets:
    def __init__(self, kafka: AIOKafkaConsumer, observer: ConsumerObserver) -> None:
        self._kafka = kafka
        self._observer = observer
        # Offsets whose records the database has committed (next offset to read).
        self._done: dict[TopicPartition, int] = {}
        # Next offset to process per partition (for lag), kept until the partition goes.
        self._next: dict[TopicPartition, int] = {}
        # Partitions being revoked: their loops take no new record.
        self._revoking: set[TopicPartition] = set()
        # Set while a revocation waits for the round: retry back-offs wake up and give up.
        self.revoking = asyncio.Event()
        self.round = asyncio.Lock()  # held while a getmany round is being processed

    def taking(self, tp: TopicPartition) -> bool:
        """Whether the partition's loop may take another record (it is not being revoked)."""
        return tp not in self._revoking

    def taken(self, tp: TopicPartition, offset: int) -> None:
        """The partition's records from offset on are being processed: until one is done,
        the next to process is the first of them (a batch in flight is not applied yet)."""
        self._next.setdefault(tp, offset)

    def done(self, tp: TopicPartition, offset: int) -> None:
        """The record at offset is applied (its transaction committed, or it was settled)."""
        self._done[tp] = self._next[tp] = offset + 1

    def next_to_process(self, tp: TopicPartition) -> int | None:
        """The next offset of the partition to process, once one of its records was."""
        return self._next.get(tp)

    def listener(self) -> ConsumerRebalanceListener:
        return _Rebalance(self)

    async def commit(self, only: set[TopicPartition] | None) -> None:
        """Send the done offsets of `only` (None: of every partition) that are still ours."""
        assigned = self._kafka.assignment()
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self._done.items()
            if (only is None or tp in only) and tp in assigned
        }
        if not offsets:
            return
        try:
            await self._kafka.commit(offsets)
            self._observer.committed()
            for tp, meta in offsets.items():
                if self._done.get(tp) == meta.offset:
                    del self._done[tp]
        except CommitFailedError as exc:
            # The group rebalanced under us: these partitions belong to someone else now,
            # who reads from the last committed offset; dedup absorbs the replay.
            self._observer.commit_failed()
            log.warning("offset commit refused after a rebalance", extra={"error": first_line(exc)})
            for tp in offsets:
                self._done.pop(tp, None)
        except KafkaError as exc:
            self._observer.commit_failed()
            log.warning(
                "offset commit failed; will retry with the next one",
                extra={"error": first_line(exc)},
            )

    async def revoke(self, revoked: set[TopicPartition]) -> None:
        """Commit what the database committed for these partitions, then let them go."""
        self._revoking |= revoked
        self.revoking.set()
        # The transaction in flight finishes; retries stop at their next failure, and the
        # rest is abandoned: a database that is away does not hold up the rebalance.
        async with self.round:
            await self.commit(revoked)  # still ours until this callback returns
            for tp in revoked:
                self._done.pop(tp, None)
                self._next.pop(tp, None)
                self._observer.revoked(tp)
        self._revoking -= revoked
        if not self._revoking:
            self.revoking.clear()
        log.info("partitions revoked", extra={"partitions": sorted(str(tp) for tp in revoked)})


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, offsets: Offsets) -> None:
        self._offsets = offsets

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._offsets.revoke(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("partitions assigned", extra={"partitions": sorted(str(tp) for tp in assigned)})
