"""Exactly once into Kafka (kafka_transactions): one transactional producer per replica,
each cycle's records in one transaction with a progress record per shard, and the progress
a shard's new owner settles before its first claim. docs/design.md ("Exactly once into
Kafka") has the argument and every failure window; this module keeps the Kafka half of it,
the step (relay/pipeline/step.py) the database half.

The replica's producer has the transactional id <prefix>-replica-<replica id>. Its init
bumps the id's epoch, so an earlier producer under the id can no longer commit. The lease
is per shard, the producer per replica, so a new owner of a shard fences the replica that
held it before (the owner the lease row named when it was taken): it initialises that
replica's transactional id once, which aborts the transaction it had open and fails its
later sends and commits. Only then is the progress topic read, so it holds every
transaction the previous owner could still commit. The fenced replica starts its producer
again and, before its next transaction, asks the database which leases it still holds
with the tokens it claimed by: a shard taken from it is let go, never sent from again.

Every transaction ends here, within the transaction timeout: committed, aborted, or (its
end not known: a commit with no answer) the producer stopped and started again, with the
progress topic read once more for every shard before the next claim. Shards in a
transaction that could not be ended are "stuck" until a transaction ends again; the
relay's /healthz fails meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import TopicPartition

from outbox_core.kafka_security import KafkaSecurity
from relay.errors import RelayConfigError
from relay.store import ClaimedRow
from relay.transport.aiokafka_adapter import (
    add_to_transaction,
    transaction_failure,
    transaction_partitions,
)
from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.kafka import KafkaPublisher, classify
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.progress import Progress, ProgressTopic
from relay.transport.protocol import ACKED, HELD, Acked, Holding, Outcome
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
    # The replica that held the lease before this one took it (None: the lease was free or
    # released): fenced before the progress topic is read for the shard.
    previous: str | None = None
    read: bool = False  # the progress topic read for it since the producer's last init
    lost: bool = False  # the database no longer shows the lease ours by this token
    # Row ids Kafka has (committed) whose settle is not confirmed yet: every progress
    # record of the shard lists them, until the database has them settled.
    unconfirmed: set[int] = field(default_factory=set)
    # Of those, the ones to settle before the shard's next claim: read from the progress
    # topic, or whose settle failed.
    orphans: set[int] = field(default_factory=set)


class ShardTransactions:
    """The Publisher of the Kafka transport with kafka_transactions on: the step calls
    ready() before each claim and publish_shards() instead of publish(); the pipeline
    calls taken() when a lease is taken and forget() when it goes."""

    def __init__(
        self,
        settings: KafkaSettings,
        security: KafkaSecurity,
        owner: str,
        events: TransactionEvents | None = None,
    ) -> None:
        self._settings = settings
        self._security = security
        self._owner = owner
        self._events: TransactionEvents = events or _Unheard()
        self.progress = ProgressTopic(settings, security)
        self._publisher = KafkaPublisher(
            settings, security, transactional_id=settings.transactional_id(owner)
        )
        # One transaction at a time (the lanes of fair turns share the producer), and no
        # init or fence while one is open.
        self._lock = asyncio.Lock()
        self._started = False  # the producer initialised
        self._verified = False  # the leases checked in the database since that init
        # The next transaction, begun before the cycle's claim with the partitions the
        # last committed one had, so their AddPartitionsToTxn round trip runs beside
        # the claim instead of before the first record can be sent.
        self._ahead = False
        self._partitions: frozenset[TopicPartition] = frozenset()
        self._shards: dict[int, _Shard] = {}
        self.stuck: set[int] = set()  # shards of a transaction that could not be ended
        self._end_s = settings.transaction_timeout_ms / 1000

    @property
    def transactional_id(self) -> str:
        return self._settings.transactional_id(self._owner)

    # ------------------------------------------------------------------ Publisher

    async def start(self) -> None:
        """Create or check the progress topic, then initialise the replica's producer (a
        broker that refuses transactions is named here, at start-up, not at the first
        claim)."""
        await self.progress.start()
        try:
            await self._publisher.start()
        except PublishFailed as exc:
            await self.progress.stop()
            if exc.retriable:
                raise
            raise TransactionsRefused(
                f"the Kafka broker refuses transactions (InitProducerId for "
                f"{self.transactional_id}): {exc}; kafka_transactions needs brokers "
                "0.11+ with a transaction coordinator, and the TransactionalId ACLs for "
                f"{self._settings.transactional_id_prefix}-*"
            ) from exc
        await self._initialised()

    async def stop(self) -> None:
        async with self._lock:
            await self._stop_producer()
        self._shards = {}
        await self.progress.stop()

    async def recreate(self) -> None:
        """The producer starts again, and the progress topic is read again."""
        async with self._lock:
            await self._stop_producer()

    async def publish(self, records: Sequence[OutgoingRecord]) -> list[Outcome]:
        raise PublishFailed(FailureReason.REFUSED, "kafka_transactions: records are sent per shard")

    # ------------------------------------------------------------------ shards

    def taken(self, shard: int, token: int, previous: str | None) -> None:
        """This replica took the shard's lease under `token` from `previous` (None: it was
        free or released): that replica is fenced before the shard's first claim."""
        self._shards[shard] = _Shard(token, previous)

    def forget(self, shard: int) -> None:
        """The shard's lease is gone: its rows are no longer sent from here."""
        self.stuck.discard(shard)
        self._shards.pop(shard, None)

    async def ready(self, tokens: Mapping[int, int], holding: Holding) -> dict[int, list[int]]:
        """Before a claim: the producer initialised and the leases checked since (holding:
        the database's answer), the previous owners of newly taken shards fenced, and the
        progress topic read for every shard not read since the init; per shard, the ids
        to settle first."""
        async with self._lock:
            for shard, token in tokens.items():
                entry = self._shards.get(shard)
                if entry is None or entry.token != token:
                    self._shards[shard] = _Shard(token)
            if not self._started:
                await self._start_producer()
            previous = {e.previous for e in self._shards.values() if e.previous and not e.read}
            if self._owner in previous:
                # The lease was this replica's name's under an earlier token (lost and
                # taken again, or a process before this one under the same replica id):
                # the producer is initialised again, after the take.
                await self._stop_producer()
                await self._start_producer()
                previous.discard(self._owner)
            if previous:
                await self._fence(previous)
            if not self._verified:
                live = await holding({s: e.token for s, e in self._shards.items() if not e.lost})
                for shard, entry in self._shards.items():
                    entry.lost = entry.lost or shard not in live
                self._verified = True
            fresh = {s: e for s, e in self._shards.items() if not e.read and not e.lost}
            if fresh:
                found = await self.progress.last(fresh)
                for shard, entry in fresh.items():
                    last = found.get(shard)
                    if last is not None and last.ids:
                        entry.orphans.update(last.ids)
                        entry.unconfirmed.update(last.ids)
                    entry.read = True
                    entry.previous = None
                log.info(
                    "progress topic read",
                    extra={
                        "shards": sorted(fresh),
                        "to_settle": sum(len(e.orphans) for e in fresh.values()),
                    },
                )
            await self._begin_ahead()
            return {
                shard: sorted(entry.orphans)
                for shard in tokens
                if (entry := self._shards.get(shard)) is not None
                and entry.orphans
                and not entry.lost
            }

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

    # ------------------------------------------------------------------ the producer

    async def _begin_ahead(self) -> None:
        """Begin the next transaction before the cycle's claim, with the partitions the
        last one committed to (the coordinator adds them while the claim runs). One the
        previous cycle did not use (its claim found nothing) is aborted here instead,
        and none is begun again until a transaction commits: an idle relay keeps no
        transaction open."""
        if not (self._started and self._verified):
            return
        producer = self._publisher.producer
        try:
            if self._ahead:
                self._ahead = False
                self._partitions = frozenset()
                if (broken := transaction_failure(producer)) is not None:
                    raise broken
                await self._within(producer.abort_transaction())
            elif self._partitions:
                await producer.begin_transaction()
                add_to_transaction(producer, self._partitions)
                self._ahead = True
        except Exception as exc:
            # Nothing was sent in it: the producer starts again before the next claim.
            error = classify(exc)
            log.warning(
                "kafka transaction failed (begun ahead, nothing sent in it); the producer "
                "starts again and reads the progress topic before the next claim",
                extra={"transactional_id": self.transactional_id, "error": str(error)},
            )
            if error.reason is FailureReason.FENCED:
                self._events.fenced()
            await self._stop_producer()

    async def _initialised(self) -> None:
        """A new epoch: every lease is checked again, and every shard's progress read
        again, before the next transaction; the progress topic is looked up (the new
        producer's first progress record must not find it unknown)."""
        await self._publisher.look_up(self.progress.topic)
        self._started = True
        self._verified = False
        self._ahead = False
        self._partitions = frozenset()
        for entry in self._shards.values():
            entry.read = False

    async def _start_producer(self) -> None:
        try:
            await self._publisher.start()
        except PublishFailed as error:
            if error.transport:
                raise TransportUnavailable(error) from error
            raise
        await self._initialised()
        log.info(
            "transactional producer started", extra={"transactional_id": self.transactional_id}
        )

    async def _stop_producer(self) -> bool:
        """Stop the producer within the transaction timeout; False if it would not stop."""
        self._started = False
        self._ahead = False
        try:
            await asyncio.wait_for(self._publisher.stop(), self._end_s)
        except TimeoutError:
            log.error(
                "the transactional producer did not stop within the transaction timeout",
                extra={"transactional_id": self.transactional_id},
            )
            return False
        return True

    async def _fence(self, owners: set[str]) -> None:
        """Initialise each replica's transactional id once: its open transaction is
        aborted (or, if its commit was under way, completed first) and its producer can
        no longer commit. Then its progress records are all below the end the progress
        topic is read to."""

        async def fence(owner: str) -> None:
            transactional_id = self._settings.transactional_id(owner)
            fencer = KafkaPublisher(
                self._settings, self._security, transactional_id=transactional_id
            )
            try:
                await fencer.start()
            finally:
                await fencer.stop()
            log.info(
                "fenced the previous owner's transactional producer",
                extra={"owner": owner, "transactional_id": transactional_id},
            )

        answers = await asyncio.gather(*map(fence, sorted(owners)), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, PublishFailed):
                raise TransportUnavailable(answer) if answer.transport else answer
            if isinstance(answer, BaseException):
                raise answer

    # ------------------------------------------------------------------ transactions

    async def publish_shards(
        self,
        rows: Sequence[ClaimedRow],
        records: Sequence[OutgoingRecord],
        tokens: Mapping[int, int],
    ) -> list[Outcome]:
        """The records (one per row) in one transaction with a progress record per shard;
        an Outcome per record. A transaction that aborted reports its failed records'
        errors and its others HELD; the rows of a shard whose lease the database no longer
        shows ours report FENCED."""
        results: list[Outcome] = [HELD] * len(records)
        async with self._lock:
            if not (self._started and self._verified):
                return results  # the next ready() starts it
            sending: list[int] = []
            for i, row in enumerate(rows):
                entry = self._shards.get(row.shard)
                if entry is None or entry.token != tokens.get(row.shard):
                    continue  # dropped or taken again meanwhile: HELD
                if entry.lost:
                    results[i] = PublishFailed(
                        FailureReason.FENCED, "the shard's lease is no longer this replica's"
                    )
                    continue
                if not entry.read:
                    continue  # taken since the last ready(): HELD
                sending.append(i)
            if sending:
                entries = {rows[i].shard: self._shards[rows[i].shard] for i in sending}
                outcomes = await self._run(
                    [rows[i] for i in sending], [records[i] for i in sending], entries
                )
                for i, outcome in zip(sending, outcomes, strict=True):
                    results[i] = outcome
        return results

    async def _run(
        self, rows: list[ClaimedRow], records: list[OutgoingRecord], entries: dict[int, _Shard]
    ) -> list[Outcome]:
        producer = self._publisher.producer

        def trailer(submitted: list[int]) -> list[OutgoingRecord]:
            # A shard's record lists its rows submitted: all of them acked when it commits
            # (any failure aborts), and those of its earlier transactions not yet confirmed.
            ids: dict[int, set[int]] = {}
            for k in submitted:
                ids.setdefault(rows[k].shard, set()).add(rows[k].id)
            return [
                Progress(
                    shard, entries[shard].token, tuple(sorted(mine | entries[shard].unconfirmed))
                ).record(self.progress.topic)
                for shard, mine in sorted(ids.items())
            ]

        try:
            if self._ahead:
                self._ahead = False  # this is the transaction begun before the claim
            else:
                await producer.begin_transaction()
            outcomes = await self._publisher.publish_then(records, trailer)
            if (broken := transaction_failure(producer)) is not None:
                # Fenced while it was open (the sender stopped on the coordinator's answer
                # to its partitions, those begun ahead too): the records' failures are the
                # producer's (sends refused outside an open transaction), none is charged,
                # and it can neither commit nor abort.
                return await self._failed(classify(broken), entries, len(records))
            stored, outcomes = outcomes[len(records) :], outcomes[: len(records)]
            for outcome in (*outcomes, *stored):
                if isinstance(outcome, PublishFailed) and outcome.reason is FailureReason.FENCED:
                    # Nothing can end this transaction but the fencer's init.
                    return await self._failed(outcome, entries, len(records))
            failed = any(isinstance(o, PublishFailed) for o in outcomes)
            acked = [row for row, o in zip(rows, outcomes, strict=True) if o is ACKED]
            if not failed and acked and not all(isinstance(s, Acked) for s in stored):
                why = f"progress record not stored: {next(s for s in stored if not isinstance(s, Acked))}"
                return await self._abort(entries, [_aborted(why)] * len(records))
            if failed or not acked:
                # A record refused inside the transaction: only it is charged; the others
                # are not visible and go again in the next one.
                return await self._abort(entries, [HELD if o is ACKED else o for o in outcomes])
            partitions = transaction_partitions(producer)
            await self._within(producer.commit_transaction())
        except Exception as exc:
            return await self._failed(classify(exc), entries, len(records))
        for row in acked:
            entries[row.shard].unconfirmed.add(row.id)
        self._partitions = partitions
        self.stuck.clear()
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

    async def _abort(self, entries: dict[int, _Shard], outcomes: list[Outcome]) -> list[Outcome]:
        try:
            await self._within(self._publisher.producer.abort_transaction())
        except Exception as exc:
            return await self._failed(classify(exc), entries, len(outcomes), outcomes)
        self.stuck.clear()
        self._events.transaction_ended(committed=False)
        return outcomes

    async def _failed(
        self,
        error: PublishFailed,
        entries: dict[int, _Shard],
        count: int,
        outcomes: list[Outcome] | None = None,
    ) -> list[Outcome]:
        """The transaction failed outside its records, or could not be aborted, or the
        producer was fenced: its end is not known here. The producer is stopped (the
        broker aborts what it had open within the transaction timeout, or the next init
        does); the next claim starts it again, checks the leases and reads the progress
        topic first. Nothing is charged."""
        self._events.transaction_ended(committed=False)
        if error.reason is FailureReason.FENCED:
            log.warning(
                "transactional producer fenced: a shard this replica held has a new owner; "
                "the producer starts again and the leases are checked before the next claim",
                extra={"transactional_id": self.transactional_id, "error": str(error)},
            )
            self._events.fenced()
        else:
            log.warning(
                "kafka transaction failed; the producer starts again and reads the progress "
                "topic before the next claim",
                extra={"transactional_id": self.transactional_id, "error": str(error)},
            )
        if not await self._stop_producer():
            self.stuck.update(entries)
        if outcomes is not None and error.reason is not FailureReason.FENCED:
            # Its abort failed: it was never to be committed, so its records' own
            # failures stand.
            return [HELD if o is ACKED else o for o in outcomes]
        # Perhaps committed: nothing is written for its rows (HELD) until the progress
        # topic, read before the next claim, has told.
        return [HELD] * count


class TransactionsRefused(RelayConfigError):
    """The broker refuses transactional producers (the relay exits 2: a configuration
    the cluster does not support)."""


def _aborted(message: str) -> PublishFailed:
    return PublishFailed(FailureReason.TRANSACTION_ABORTED, message)
