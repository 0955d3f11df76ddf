"""Exactly once into Kafka (kafka_transactions): a transactional producer per held shard,
each cycle's records of a shard in one transaction with its progress record, and the
progress a shard's new owner settles before its first claim. docs/design.md ("Exactly
once into Kafka") has the argument and every failure window; this module keeps the
Kafka half of it, the step (relay/pipeline/step.py) the database half.

A shard's producer has the transactional id <prefix>-shard-<n>. Starting it is Kafka's
init: the id's epoch is bumped, so the previous owner's open transaction is aborted and
its later commits fail (fenced). Only then is the progress topic read, so it holds every
transaction the previous owner could still commit.

Every transaction ends here, within the transaction timeout: committed, aborted, or
(its end not known: a commit with no answer) its producer stopped and started again,
with the progress topic read once more before the shard's next claim. A shard whose
transaction could not be ended is "stuck" until one of its transactions ends again; the
relay's /healthz fails meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from outbox_core.kafka_security import KafkaSecurity
from relay.errors import RelayConfigError
from relay.store import ClaimedRow
from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.kafka import KafkaPublisher, classify
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.progress import Progress, ProgressTopic
from relay.transport.protocol import ACKED, HELD, Acked, Outcome
from relay.transport.records import OutgoingRecord

log = logging.getLogger("relay.transactions")


class TransactionEvents(Protocol):
    """What the relay's metrics hear of the transactions (relay.ops.observer)."""

    def transaction_ended(self, committed: bool) -> None: ...

    def fenced(self) -> None: ...

    def recovered(self, rows: int) -> None: ...


class _Unheard:
    def transaction_ended(self, committed: bool) -> None:
        return None

    def fenced(self) -> None:
        return None

    def recovered(self, rows: int) -> None:
        return None


@dataclass(eq=False)
class _Shard:
    token: int
    publisher: KafkaPublisher
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: bool = False  # initialised, and the progress topic read since
    # Row ids Kafka has (committed) whose settle is not confirmed yet: every progress
    # record of the shard lists them, until the database has them settled.
    unconfirmed: set[int] = field(default_factory=set)
    # Of those, the ones to settle before the shard's next claim: read from the progress
    # topic, or whose settle failed.
    orphans: set[int] = field(default_factory=set)


class ShardTransactions:
    """The Publisher of the Kafka transport with kafka_transactions on: the step calls
    ready() before each claim and publish_shards() instead of publish()."""

    def __init__(
        self,
        settings: KafkaSettings,
        security: KafkaSecurity,
        events: TransactionEvents | None = None,
    ) -> None:
        self._settings = settings
        self._security = security
        self._events: TransactionEvents = events or _Unheard()
        self.progress = ProgressTopic(settings, security)
        self._shards: dict[int, _Shard] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.stuck: set[int] = set()  # shards whose last transaction could not be ended
        self._end_s = settings.transaction_timeout_ms / 1000

    # ------------------------------------------------------------------ Publisher

    async def start(self) -> None:
        """Create or check the progress topic, then check the broker initialises a
        transactional producer (a broker that refuses transactions is named here, at
        start-up, not at the first claim)."""
        await self.progress.start()
        check = KafkaPublisher(
            self._settings,
            self._security,
            transactional_id=f"{self._settings.transactional_id_prefix}-check",
        )
        try:
            await check.start()
        except PublishFailed as exc:
            await self.progress.stop()
            if exc.retriable:
                raise
            raise TransactionsRefused(
                f"the Kafka broker refuses transactions (InitProducerId for "
                f"{check.transactional_id}): {exc}; kafka_transactions needs brokers "
                "0.11+ with a transaction coordinator, and the TransactionalId ACLs for "
                f"{self._settings.transactional_id_prefix}-*"
            ) from exc
        finally:
            await check.stop()

    async def stop(self) -> None:
        shards, self._shards = self._shards, {}
        await asyncio.gather(*(self._stop(entry) for entry in shards.values()))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        await self.progress.stop()

    async def recreate(self) -> None:
        """Every shard's producer starts again, and reads the progress topic again."""
        for entry in list(self._shards.values()):
            async with entry.lock:
                await self._stop(entry)

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        raise PublishFailed(FailureReason.REFUSED, "kafka_transactions: records are sent per shard")

    # ------------------------------------------------------------------ shards

    def forget(self, shard: int) -> None:
        """The shard's lease is gone: its producer is closed (beside the cycle). A
        transaction it could not end is the next owner's init to abort."""
        self.stuck.discard(shard)
        entry = self._shards.pop(shard, None)
        if entry is None:
            return
        task = asyncio.create_task(self._stop_locked(entry), name=f"close-producer-{shard}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def ready(self, tokens: Mapping[int, int]) -> dict[int, list[int]]:
        """Before a claim: each shard's producer started under its lease (the init that
        fences the previous owner), and the ids each shard must settle first (read from
        the progress topic after the init, or whose settle failed)."""
        starting: list[tuple[int, _Shard]] = []
        for shard, token in tokens.items():
            entry = self._shards.get(shard)
            if entry is not None and entry.token != token:
                self.forget(shard)  # the lease was taken again: a producer of its own
                entry = None
            if entry is None:
                transactional_id = self._settings.transactional_id(shard)
                publisher = KafkaPublisher(
                    self._settings, self._security, transactional_id=transactional_id
                )
                entry = self._shards[shard] = _Shard(token, publisher)
            if not entry.started:
                starting.append((shard, entry))
        if starting:
            await self._start(starting)
        return {
            shard: sorted(entry.orphans)
            for shard in tokens
            if (entry := self._shards.get(shard)) is not None and entry.orphans
        }

    async def _start(self, entries: list[tuple[int, _Shard]]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            for _, entry in entries:
                await stack.enter_async_context(entry.lock)
            waiting = [(shard, entry) for shard, entry in entries if not entry.started]
            answers = await asyncio.gather(
                *(entry.publisher.recreate() for _, entry in waiting), return_exceptions=True
            )
            failed = [a for a in answers if isinstance(a, BaseException)]
            if failed:
                error = failed[0]
                if isinstance(error, PublishFailed):
                    raise TransportUnavailable(error) if error.transport else error
                raise error
            found = await self.progress.last(shard for shard, _ in waiting)
            for shard, entry in waiting:
                last = found.get(shard)
                if last is not None and last.ids:
                    entry.orphans.update(last.ids)
                    entry.unconfirmed.update(last.ids)
                entry.started = True
                log.info(
                    "transactional producer started",
                    extra={
                        "shard": shard,
                        "transactional_id": entry.publisher.transactional_id,
                        "to_settle": len(entry.orphans),
                    },
                )

    def confirm(self, shard: int, ids: Sequence[int], *, recovered: bool = False) -> None:
        """The database has these rows of the shard settled (recovered: from the
        progress topic, or after a settle that failed)."""
        entry = self._shards.get(shard)
        if entry is None:
            return
        entry.unconfirmed.difference_update(ids)
        entry.orphans.difference_update(ids)
        if recovered:
            self._events.recovered(len(ids))

    def unsettled(self, shard: int, ids: Sequence[int]) -> None:
        """Their settle failed: they are settled before the shard's next claim."""
        entry = self._shards.get(shard)
        if entry is not None:
            entry.orphans.update(set(ids) & entry.unconfirmed)

    # ------------------------------------------------------------------ transactions

    async def publish_shards(
        self,
        rows: Sequence[ClaimedRow],
        records: Sequence[OutgoingRecord],
        tokens: Mapping[int, int],
    ) -> list[Outcome]:
        """The records (one per row) in one transaction per shard, all shards at once;
        an Outcome per record. A shard whose transaction aborted reports its failed
        records' errors and its others HELD; a fenced shard reports FENCED."""
        results: list[Outcome] = [HELD] * len(records)
        by_shard: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_shard.setdefault(row.shard, []).append(i)
        await asyncio.gather(
            *(
                self._transaction(shard, tokens[shard], indexes, rows, records, results)
                for shard, indexes in by_shard.items()
            )
        )
        return results

    async def _transaction(
        self,
        shard: int,
        token: int,
        indexes: list[int],
        rows: Sequence[ClaimedRow],
        records: Sequence[OutgoingRecord],
        results: list[Outcome],
    ) -> None:
        entry = self._shards.get(shard)
        if entry is None or entry.token != token or not entry.started:
            return  # dropped meanwhile: HELD, the rows are the next owner's
        async with entry.lock:
            if not entry.started:
                return
            outcomes = await self._run(shard, entry, [records[i] for i in indexes], indexes, rows)
        for i, outcome in zip(indexes, outcomes, strict=True):
            results[i] = outcome

    async def _run(
        self,
        shard: int,
        entry: _Shard,
        records: list[OutgoingRecord],
        indexes: list[int],
        rows: Sequence[ClaimedRow],
    ) -> list[Outcome]:
        producer = entry.publisher.producer
        try:
            await producer.begin_transaction()
            progress: list[Progress] = []

            def trailer(submitted: list[int]) -> OutgoingRecord | None:
                # Its ids are the rows submitted: all of them acked when it commits (any
                # failure aborts), and those of earlier transactions not yet confirmed.
                if not submitted:
                    return None
                ids = {rows[indexes[k]].id for k in submitted} | entry.unconfirmed
                progress.append(Progress(shard, entry.token, tuple(sorted(ids))))
                return progress[0].record(self.progress.topic)

            outcomes = await entry.publisher.publish_then(records, trailer)
            stored = outcomes.pop() if progress else None
            for outcome in outcomes:
                if isinstance(outcome, PublishFailed) and outcome.reason is FailureReason.FENCED:
                    # Nothing can end this transaction but the new owner's init.
                    return await self._failed(shard, entry, outcome, len(records))
            failed = any(isinstance(o, PublishFailed) for o in outcomes)
            acked = [rows[i].id for i, o in zip(indexes, outcomes, strict=True) if o is ACKED]
            if not failed and acked and not isinstance(stored, Acked):
                why = f"progress record not stored: {stored}"
                return await self._abort(shard, entry, [_aborted(why)] * len(records))
            if failed or not acked:
                # A record refused inside the transaction: only it is charged; the others
                # are not visible and go again in the next one.
                return await self._abort(
                    shard, entry, [HELD if o is ACKED else o for o in outcomes]
                )
            await self._within(producer.commit_transaction())
        except Exception as exc:
            return await self._failed(shard, entry, classify(exc), len(records))
        entry.unconfirmed.update(acked)
        self.stuck.discard(shard)
        self._events.transaction_ended(committed=True)
        return outcomes

    async def _within(self, end: Awaitable[None]) -> None:
        try:
            await asyncio.wait_for(end, self._end_s)
        except TimeoutError as exc:
            raise PublishFailed(
                FailureReason.TIMEOUT,
                f"the transaction did not end within {self._end_s:.0f}s (the transaction timeout)",
            ) from exc

    async def _abort(self, shard: int, entry: _Shard, outcomes: list[Outcome]) -> list[Outcome]:
        try:
            await self._within(entry.publisher.producer.abort_transaction())
        except Exception as exc:
            return await self._failed(shard, entry, classify(exc), len(outcomes), outcomes)
        self.stuck.discard(shard)
        self._events.transaction_ended(committed=False)
        return outcomes

    async def _failed(
        self,
        shard: int,
        entry: _Shard,
        error: PublishFailed,
        count: int,
        outcomes: list[Outcome] | None = None,
    ) -> list[Outcome]:
        """The transaction failed outside its records, or could not be aborted: its end
        is not known. The producer is stopped (the broker aborts what it had open within
        the transaction timeout, or the next init does); the next claim starts it again
        and reads the progress topic first."""
        self._events.transaction_ended(committed=False)
        if error.reason is FailureReason.FENCED:
            log.warning(
                "transactional producer fenced: the shard has another owner",
                extra={"shard": shard, "error": str(error)},
            )
            self._events.fenced()
            if self._shards.get(shard) is entry:
                del self._shards[shard]
            await self._stop(entry)
            return [error] * count
        log.warning(
            "kafka transaction failed; its producer starts again and reads the progress "
            "topic before the shard's next claim",
            extra={"shard": shard, "error": str(error)},
        )
        if not await self._stop(entry):
            self.stuck.add(shard)
        if outcomes is not None:
            # Its abort failed: it was never to be committed, so its records' own
            # failures stand.
            return [HELD if o is ACKED else o for o in outcomes]
        # Perhaps committed: nothing is written for its rows (HELD) until the progress
        # topic, read before the shard's next claim, has told.
        return [HELD] * count

    async def _stop(self, entry: _Shard) -> bool:
        """Stop the shard's producer within the transaction timeout; False if it would
        not stop."""
        entry.started = False
        try:
            await asyncio.wait_for(entry.publisher.stop(), self._end_s)
        except TimeoutError:
            log.error(
                "a transactional producer did not stop within the transaction timeout",
                extra={"transactional_id": entry.publisher.transactional_id},
            )
            return False
        return True

    async def _stop_locked(self, entry: _Shard) -> None:
        async with entry.lock:
            await self._stop(entry)


class TransactionsRefused(RelayConfigError):
    """The broker refuses transactional producers (the relay exits 2: a configuration
    the cluster does not support)."""


def _aborted(message: str) -> PublishFailed:
    return PublishFailed(FailureReason.TRANSACTION_ABORTED, message)
