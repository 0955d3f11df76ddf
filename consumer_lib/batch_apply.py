"""One partition's share of a fetch, applied in order, in batches.

Consecutive records whose handlers allow it (the default; not `batch=False`) are applied
in one transaction, up to batch_max_records records and batch_max_bytes of keys and
values: one dedup statement, their handlers in order, one commit, one fsync. A record that
must be settled otherwise (dead-lettered, skipped) or applied alone first ends the batch
before it, so offsets are only ever marked done in order. When a handler fails inside a
batch, the transaction rolls back and the batch is re-applied one record at a time: the
failing record alone is retried or dead-lettered, the others commit, none twice.
"""

from __future__ import annotations

import contextlib

from aiokafka import ConsumerRecord, TopicPartition

from consumer_lib.apply import Abandon, ApplyPolicy, Prepared, Settle
from consumer_lib.offsets import Offsets
from outbox_core.supervisor import Supervisor


class PartitionApply:
    def __init__(self, policy: ApplyPolicy, offsets: Offsets, supervisor: Supervisor) -> None:
        self._policy = policy
        self._offsets = offsets
        self._sup = supervisor
        settings = policy.settings
        self._max_records = settings.batch_max_records if settings.batch else 1
        self._max_bytes = settings.batch_max_bytes

    async def run(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        """Apply the records in order, marking each done once settled; stops (leaving the
        rest for the next owner) when stopping or when the partition is being revoked."""
        if records:
            self._offsets.taken(tp, records[0].offset)
        with contextlib.suppress(Abandon):
            await self._run(tp, records)

    async def _run(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        policy = self._policy
        batch: list[Prepared] = []
        size = 0
        for record in records:
            if not policy.holding(tp):
                break  # abandoned: not marked done, so read again by the next owner
            found = policy.examine(record)
            if isinstance(found, Prepared) and found.registration.batch:
                if batch and (
                    len(batch) >= self._max_records or size + found.size > self._max_bytes
                ):
                    await self._apply(tp, batch)
                    batch, size = [], 0
                batch.append(found)
                size += found.size
                continue
            await self._apply(tp, batch)
            batch, size = [], 0
            if isinstance(found, Settle):
                await policy.settle(found)
            else:
                await policy.apply_one(found)
            self._done(tp, record)
        else:
            await self._apply(tp, batch)

    async def _apply(self, tp: TopicPartition, batch: list[Prepared]) -> None:
        if not batch:
            return
        if not self._policy.holding(tp):
            raise Abandon
        if len(batch) > 1 and await self._policy.apply_batch(batch):
            self._done(tp, batch[-1].record)
            return
        for item in batch:
            if not self._policy.holding(tp):
                raise Abandon
            await self._policy.apply_one(item)
            self._done(tp, item.record)

    def _done(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        self._offsets.done(tp, record.offset)
        self._sup.tick()
