"""The relay's step: one lane's claim, send and settle over every shard it holds. The
loop (loop.py) runs it, and so do the tests; no loop, no sleep here.

A step claims up to batch_size rows per shard, each shard's within its share of
claim_max_bytes, in one statement, turns them into records, lets KeyOrder (ordering.py)
decide which may go out, publishes those, and starts their settle: one statement, fenced
per shard (nothing is written for a shard whose lease no longer carries its token). The
settle runs while the next step claims and sends; that step waits for it before starting
its own, so at most one settle is in flight. In the loop, a claim its byte budget cut
(a backlog of large events) has the next claim made while its acks are awaited, so
claiming and sending overlap; that claim leaves out the keys in flight (KeyOrder.beside).

What a failure costs is decided here, from its FailureReason: charged with backoff, parked,
or (a broken producer; the transport away as a whole) not charged at all.

With kafka_transactions the publisher is a ShardPublisher (relay/transport/transactions.py):
before each claim the rows Kafka already has and the database has not settled are
settled (after a takeover, or a settle that failed), a cycle's records go in one
transaction, and a shard whose lease the database no longer shows ours is reported lost,
nothing charged (docs/design.md, "Exactly once into Kafka").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from outbox_core.backoff import BackoffError, BackoffPolicy
from outbox_core.settings import SettingsGroup
from outbox_core.supervisor import pieces
from relay.errors import StoreUnavailable
from relay.pipeline.ordering import KeyOrder, Plan
from relay.store import (
    MOVE_MAX_BYTES,
    ClaimedRow,
    ClaimRequest,
    Failure,
    SettleRequest,
    Store,
    TenantTurns,
)
from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.protocol import Outcome, Publisher, ShardPublisher
from relay.transport.records import OutgoingRecord, RecordShape, to_records

log = logging.getLogger("relay.cycle")

MAX_ERROR_CHARS = 2000


class BatchSettings(SettingsGroup):
    """How rows are claimed and what a failure costs them."""

    batch_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Rows claimed per shard per cycle (one cycle claims for every held shard).",
    )
    claim_max_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="Payload bytes one claim holds at most (every lane and held shard "
        "together, each shard an even share per cycle; while a backlog drains, the next "
        "claim is made beside the acks of the one being sent, so two are held), so memory "
        "stays bounded whatever the events' sizes (docs/deploy.md, Memory). An event larger "
        "than its shard's share is claimed alone, when its shard's turn comes.",
    )
    max_attempts: int = Field(
        default=12, ge=1, description="Failed sends of one row before it is parked."
    )
    backoff_base_s: float = Field(
        default=0.5, gt=0, description="Backoff after a row's first failure; doubles per attempt."
    )
    backoff_max_s: float = Field(default=300.0, gt=0, description="Longest backoff of one row.")
    failure_policy: Literal["block_key", "skip"] = Field(
        default="block_key",
        description="block_key: a failing or parked row holds back later rows of its key; "
        "skip: later rows go ahead.",
    )

    def backoff(self) -> BackoffPolicy:
        """A failed row's waits, from the attempts persisted on it; jittered, so that rows
        that failed together do not all come back together."""
        return BackoffPolicy(self.backoff_base_s, self.backoff_max_s, jitter=True)

    @model_validator(mode="after")
    def _backoff_is_valid(self) -> BatchSettings:
        try:
            self.backoff()
        except BackoffError as exc:  # inf or nan: a row would wait forever, or for nothing
            raise ValueError(
                "backoff_base_s (OUTBOX_BACKOFF_BASE_S) and backoff_max_s "
                f"(OUTBOX_BACKOFF_MAX_S): {exc}"
            ) from exc
        return self


class TopicSettings(SettingsGroup):
    """Where a row's topic goes on Kafka."""

    env_infix: ClassVar[str] = "topic_"

    prefix: str = Field(default="", description="Prepended to every row's topic.")
    map: dict[str, str] = Field(
        default_factory=dict,
        description='JSON object mapping a row topic to a Kafka topic, e.g. {"orders":"prod.orders"}.',
    )

    def kafka_topic(self, row_topic: str) -> str:
        return self.prefix + self.map.get(row_topic, row_topic)


@dataclass(frozen=True)
class BatchRules:
    """What one step needs, drawn from the settings (RelaySettings.batch_rules())."""

    owner: str  # this replica: the settle is fenced on (shard, owner, token)
    batch: BatchSettings
    topics: TopicSettings
    max_request_size: int  # the producer's: a larger record is refused before sending
    keep: bool  # retention=keep: mark published rows instead of deleting them
    move_max_bytes: int = MOVE_MAX_BYTES  # keep: larger payloads are marked where they are
    turns: TenantTurns | None = None  # fair_tenants: claims take turns between tenants
    bulk_rows: int | None = None  # with turns: a tenant's backlog drains in a lane of its own
    # The record format of a row topic (None: native).
    shape_of: Callable[[str], RecordShape | None] = field(default=lambda _topic: None)

    @property
    def lanes(self) -> int:
        """The pipeline's lanes (loop.py): quick and bulk with turns and bulk_rows, else one."""
        return 2 if self.turns is not None and self.bulk_rows is not None else 1

    def shard_bytes(self, shards: int) -> int:
        """A shard's share of claim_max_bytes in one claim of this many shards: the budget
        is the relay's, split between its lanes and the shards they claim for."""
        return max(1, self.batch.claim_max_bytes // (self.lanes * max(1, shards)))

    @property
    def shard_full_at(self) -> int:
        """Rows of one shard's batch that say more are probably waiting: batch_size, or a
        tenant's cap when that is lower (a capped tenant's next rows wait for the next
        cycle, which then starts at once)."""
        size = self.batch.batch_size
        if self.turns is None or self.turns.max_rows is None:
            return size
        return min(size, self.turns.max_rows)


@dataclass(frozen=True)
class BatchOutcome:
    claimed: int
    published: int = 0
    retried: int = 0
    parked: int = 0
    held_back: int = 0  # rows not sent because an earlier row of their key failed
    fatal_producer_error: bool = False
    full: bool = False  # a shard gave as many rows as asked for: more are probably waiting
    lost: frozenset[int] = frozenset()  # shards whose lease was gone at the settle
    acked_at: float = 0.0  # epoch seconds: the transport's acks are in and settled
    # created_at of each row published: commit-to-ack is acked_at minus each of them
    published_created_at: list[float] = field(default_factory=list, repr=False)
    published_by_topic: dict[str, int] = field(default_factory=dict, repr=False)
    failures_by_reason: dict[FailureReason, int] = field(default_factory=dict, repr=False)
    # Rows of a topic missing or not authorized, by Kafka topic.
    unavailable_by_topic: dict[str, int] = field(default_factory=dict, repr=False)


_ID = attrgetter("id")  # per published row: map() with it runs in C
_CREATED_AT = attrgetter("created_at")
_PAYLOAD = attrgetter("payload")
_SHARD = attrgetter("shard")


def _bytes_full(rows: list[ClaimedRow], share: int, per_shard: Counter[int]) -> bool:
    """A shard's rows stopped at its share of the byte budget (a row like its largest
    would not have fitted): more are probably waiting. per_shard: the rows of each shard."""
    sizes = list(map(len, map(_PAYLOAD, rows)))
    largest_row = max(sizes)
    # No shard can have reached it when the whole claim fits in one share, or when the most
    # rows any shard has, each as large as the largest, would: passes in C. The second
    # bound is a bulk claim's (thousands of rows over every shard), whose per-row pass
    # below ran several milliseconds in one stretch of the event loop it shares.
    if sum(sizes) + largest_row <= share or (max(per_shard.values()) + 1) * largest_row <= share:
        return False
    used: Counter[int] = Counter()
    largest: Counter[int] = Counter()
    for row in rows:
        size = len(row.payload)
        used[row.shard] += size
        largest[row.shard] = max(largest[row.shard], size)
    return any(used[s] + largest[s] > share for s in used)


def _ids_by_shard(rows: Sequence[ClaimedRow]) -> dict[int, list[int]]:
    by_shard: dict[int, list[int]] = {}
    for row in rows:
        by_shard.setdefault(row.shard, []).append(row.id)
    return by_shard


def backoff_s(attempts_before: int, settings: BatchSettings) -> float:
    """The wait of a row that failed after attempts_before earlier failures."""
    return settings.backoff().delay_s(attempts_before)


# Failures that say a topic cannot take anything now, counted by topic for the operator.
TOPIC_UNAVAILABLE = frozenset({FailureReason.UNKNOWN_TOPIC, FailureReason.TOPIC_DENIED})


def _failure(row: ClaimedRow, error: PublishFailed, settings: BatchSettings) -> Failure:
    # An uncharged failure (not the row's fault) backs the row off like any other, its
    # attempts the exponent, but never parks it.
    park = (not error.retriable) or (error.charged and row.attempts + 1 >= settings.max_attempts)
    return Failure(row.id, str(error)[:MAX_ERROR_CHARS], backoff_s(row.attempts, settings), park)


@dataclass
class Sent:
    """A batch claimed and sent, its acks in, its settle to come (Step.send's result)."""

    number: int  # the step's sends are numbered as they begin
    tokens: dict[int, int]  # the leases of the shards its rows came from
    rows: list[ClaimedRow]
    published: list[ClaimedRow]
    errors: dict[int, PublishFailed]  # by row id
    failures: list[Failure]  # the errors charged to their rows
    failed: list[ClaimedRow]  # their rows
    held_back: int
    fatal: bool
    full: bool
    # kafka_transactions: shards whose lease the database showed another's (FENCED)
    fenced: frozenset[int] = frozenset()


@dataclass
class _Ahead:
    """A claim made for send `number` while the previous send's acks were awaited."""

    number: int
    tokens: dict[int, int]
    rules: BatchRules
    task: asyncio.Task[list[ClaimedRow]]


OnSettled = Callable[[Sent, BatchOutcome | None], Awaitable[None]]


async def _nothing(sent: Sent, outcome: BatchOutcome | None) -> None:
    return None


class Step:
    """One lane's claim -> send -> settle, with at most one settle in flight.

    `send` is what the loop runs: claim and send while the previous batch settles, then
    wait for that settle and start this batch's. `run` is send and then that settle:
    one whole step, settled before it returns. on_settled hears of every settle's end
    (None: the settle failed, and its rows go out again).
    """

    def __init__(
        self,
        rules: BatchRules,
        *,
        store: Store,
        publisher: Publisher,
        on_settled: OnSettled = _nothing,
    ) -> None:
        self.rules = rules
        self._store = store
        self._publisher = publisher
        self._on_settled = on_settled
        self.order = KeyOrder(rules.batch.failure_policy)
        self.begun = 0  # sends begun; Sent.number
        self._settling: tuple[Sent, asyncio.Task[BatchOutcome]] | None = None
        self._ahead: _Ahead | None = None  # the next claim, made while acks are awaited
        self._dropped: set[asyncio.Task[list[ClaimedRow]]] = set()  # held until they end
        # kafka_transactions: the publisher that sends a transaction per shard
        self._shards = publisher if isinstance(publisher, ShardPublisher) else None

    @property
    def settling(self) -> bool:
        """A settle is in flight."""
        return self._settling is not None

    async def run(self, tokens: Mapping[int, int]) -> BatchOutcome:
        """One whole step: send, then wait for its settle."""
        sent = await self.send(tokens)
        if sent is None or self._settling is None:
            return BatchOutcome(0)
        task = self._settling[1]
        try:
            return await asyncio.shield(task)  # a failed settle raises here, to the caller
        finally:
            await self.settled()

    async def send(
        self, tokens: Mapping[int, int], rules: BatchRules | None = None, *, ahead: bool = False
    ) -> Sent | None:
        """Claim for these shards (rules: this claim's, e.g. a lane's tenants), send, wait
        for the acks; meanwhile the previous batch settles. Then start this batch's
        settle. None when nothing was due.

        ahead: when its byte budget cut this claim, the next one (same shards and rules) is
        made while this one's acks are awaited, leaving out this claim's rows and keys;
        the next send uses it. The loop asks for it; a lone step (run) never does."""
        self.begun += 1
        try:
            sent = await self._send(self.begun, tokens, rules or self.rules, ahead)
        except BaseException:
            self.drop_ahead()
            raise
        finally:
            await self.settled()
        if sent is not None:
            self.order.settling(sent.published, sent.failed)
            task = asyncio.create_task(self._settle(sent))
            self._settling = (sent, task)
        return sent

    async def settled(self) -> BatchOutcome | None:
        """Wait for the settle in flight, if any; None when there was none or it failed."""
        if self._settling is None:
            return None
        sent, task = self._settling
        outcome: BatchOutcome | None = None
        try:
            outcome = await asyncio.shield(task)
        except StoreUnavailable as exc:
            # Published but not marked: the rows stay pending and go out again (a
            # duplicate, never a loss); the next claim finds the database's state.
            if self._shards is None:
                log.warning("settle failed; its rows will be sent again", extra={"error": str(exc)})
            else:  # Kafka has them: settled before the next claim (_settle_what_kafka_has)
                log.warning(
                    "settle failed; its rows are settled before the next claim",
                    extra={"error": str(exc)},
                )
        finally:
            if task.done():  # not when only this wait was cancelled: the settle goes on
                self._settling = None
                self.order.settled()
                await self._on_settled(sent, outcome)
        return outcome

    def abandon(self) -> None:
        """Shutdown past its grace period: stop waiting for the settle in flight."""
        if self._settling is not None:
            self._settling[1].cancel()
        self.drop_ahead(cancel=True)

    def drop_ahead(self, *, cancel: bool = False) -> None:
        """Forget the claim made ahead, if any: its rows stay pending (a claim writes
        nothing), for a later claim. cancel: shutdown; otherwise the statement ends on its
        own (a statement cut short can cost its connection)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        if cancel:
            ahead.task.cancel()
        self._dropped.add(ahead.task)
        ahead.task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[list[ClaimedRow]]) -> None:
        self._dropped.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an outage there is the next claim's to meet

    def _request(
        self,
        number: int,
        tokens: Mapping[int, int],
        rules: BatchRules,
        in_flight: Sequence[int],
        held_keys: Sequence[str],
    ) -> ClaimRequest:
        settings = rules.batch
        shards = list(tokens)
        # The first shard's first row is claimed whatever its size: each shard comes first
        # in turn, so an event larger than a shard's share of the budget waits at most a
        # cycle per shard.
        turn = number % max(1, len(shards))
        shards = shards[turn:] + shards[:turn]
        return ClaimRequest(
            shards,
            settings.batch_size,
            settings.failure_policy,
            in_flight,
            rules.turns,
            shard_bytes=rules.shard_bytes(len(shards)),
            held_keys=held_keys,
        )

    async def _claimed_ahead(
        self, number: int, tokens: Mapping[int, int], rules: BatchRules
    ) -> list[ClaimedRow]:
        """The rows claimed ahead for this send; [] when there are none or they no longer
        fit it (other shards or leases, other rules: a fresh claim is made instead)."""
        ahead = self._ahead
        if ahead is None:
            return []
        if ahead.number != number or ahead.tokens != dict(tokens) or ahead.rules is not rules:
            self.drop_ahead()
            return []
        self._ahead = None
        try:
            return await ahead.task
        except StoreUnavailable:
            return []  # the fresh claim meets the database's state (and its outage)

    def _claim_ahead(
        self, number: int, tokens: Mapping[int, int], rules: BatchRules, rows: list[ClaimedRow]
    ) -> None:
        """Start the next send's claim beside this one's acks, leaving out what KeyOrder
        says is in flight."""
        request = self._request(number + 1, tokens, rules, *self.order.beside(rows))
        self._ahead = _Ahead(
            number + 1, dict(tokens), rules, asyncio.create_task(self._store.claim(request))
        )

    async def _send(
        self, number: int, tokens: Mapping[int, int], rules: BatchRules, ahead: bool = False
    ) -> Sent | None:
        settings = rules.batch
        request = self._request(number, tokens, rules, self.order.in_flight, self.order.held_keys)
        share = request.shard_bytes
        if self._shards is not None:
            await self._settle_what_kafka_has(self._shards, tokens)
        rows = await self._claimed_ahead(number, tokens, rules)
        if not rows:
            rows = await self._store.claim(request)
        if not rows:
            return None
        limit = rules.max_request_size
        # A topic of the wrong type (a row written around producer_lib) has no Kafka
        # topic: to_records reports its row malformed.
        topic_of = {
            t: rules.topics.kafka_topic(t) for t in {row.topic for row in rows} if type(t) is str
        }
        shapes = {t: shape for t in topic_of if (shape := rules.shape_of(t)) is not None}
        records: list[OutgoingRecord] = []
        oversized: dict[int, int] = {}
        malformed: dict[int, str] = {}
        async for start, piece in pieces(rows):  # a large claim gives the other lane turns
            built, too_large, bad = to_records(piece, topic_of, limit, shapes)
            records += built
            oversized.update((start + i, size) for i, size in too_large.items())
            malformed.update((start + i, why) for i, why in bad.items())
        if malformed:
            log.warning(
                "rows that cannot become records are parked",
                extra={
                    "ids": [rows[i].id for i in list(malformed)[:10]],
                    "rows": len(malformed),
                    "first": next(iter(malformed.values())),
                },
            )
        plan: Plan = self.order.plan(rows, records, oversized, limit, malformed)
        per_shard = Counter(map(_SHARD, rows))
        cut_by_bytes = _bytes_full(rows, share, per_shard)
        full = max(per_shard.values()) >= rules.shard_full_at or cut_by_bytes
        # Only a claim its byte budget cut: its few large records leave the broker idle
        # while their acks come back. A claim full of small rows has every key of the
        # backlog in flight, so a claim beside it would find almost nothing to take.
        # Not with kafka_transactions: a claim made beside the acks could take rows whose
        # settle fails meanwhile, which must be settled before any claim sees them.
        if ahead and cut_by_bytes and plan.records and rules.turns is None and self._shards is None:
            self._claim_ahead(number, tokens, rules, rows)
        outcomes: list[Outcome] = []
        if plan.records and self._shards is not None:
            outcomes = await self._shards.publish_shards(plan.sending, plan.records, tokens)
        elif plan.records:
            outcomes = await self._publisher.publish(plan.records)
        verdict = self.order.judge(plan, outcomes)
        errors, published = verdict.errors, verdict.published
        # kafka_transactions: a shard whose lease the database showed another's after
        # the producer's init has a new owner. (A plain producer fenced is a broken
        # producer, replaced as any other.)
        fenced = frozenset(
            row.shard
            for row in plan.sending
            if self._shards is not None
            and (e := errors.get(row.id)) is not None
            and e.reason is FailureReason.FENCED
        )
        if fenced:
            # The shard has another owner: its rows are that owner's, nothing is charged.
            errors = {
                row.id: e
                for row in rows
                if (e := errors.get(row.id)) is not None and row.shard not in fenced
            }
        # A broken producer is not the rows' fault: they stay pending, uncharged. When
        # nothing got through and every failure is the transport's, the transport as a
        # whole is away: nothing is charged and the loop backs off. A topic-level error
        # (unknown topic) is charged to its rows even then, so a missing topic cannot hold
        # the whole shard back.
        if errors and not published and all(e.transport for e in errors.values()):
            raise TransportUnavailable(next(iter(errors.values())))
        by_id = {row.id: row for row in rows} if errors else {}
        failed = [by_id[i] for i, e in errors.items() if not e.fatal]
        return Sent(
            number=number,
            tokens={s: t for s, t in tokens.items() if s in per_shard},
            rows=rows,
            published=published,
            errors=errors,
            failures=[_failure(row, errors[row.id], settings) for row in failed],
            failed=failed,
            held_back=verdict.held_back,
            # A transactional publisher replaces a shard's broken producer itself.
            fatal=verdict.fatal and self._shards is None,
            full=full,
            fenced=fenced,
        )

    async def _settle_what_kafka_has(
        self, shards: ShardPublisher, tokens: Mapping[int, int]
    ) -> None:
        """kafka_transactions, before a claim: the producer started and the leases checked
        since, each newly taken shard's previous owner fenced, then the rows Kafka has and
        the database does not (read from the progress topic, or whose settle failed)
        settled, so no claim sends them again."""
        orphans = await shards.ready(tokens, self._holding)
        if not orphans:
            return
        rules = self.rules
        settled = await self._store.settle(
            SettleRequest(
                rules.owner,
                {shard: tokens[shard] for shard in orphans},
                [i for ids in orphans.values() for i in ids],
                [],
                rules.keep,
                rules.move_max_bytes,
            )
        )
        for shard, ids in orphans.items():
            if shard not in settled.lost:
                shards.confirm(shard, ids, recovered=True)
        log.info(
            "rows Kafka already has settled before the claim",
            extra={"rows": sum(map(len, orphans.values())), "shards": sorted(orphans)},
        )

    async def _holding(self, tokens: Mapping[int, int]) -> set[int]:
        """The shards of these leases the database shows this replica's, live, by these
        tokens (kafka_transactions asks after each init of its producer)."""
        owner = self.rules.owner
        return {
            lease.shard
            for lease in await self._store.lease_list()
            if lease.live and lease.owner == owner and tokens.get(lease.shard) == lease.token
        }

    async def _settle(self, sent: Sent) -> BatchOutcome:
        """Mark the published rows and record the failures, fenced per shard."""
        rules = self.rules
        published, failures = sent.published, sent.failures
        try:
            settled = await self._store.settle(
                SettleRequest(
                    rules.owner,
                    {s: t for s, t in sent.tokens.items() if s not in sent.fenced},
                    list(map(_ID, published)),
                    failures,
                    rules.keep,
                    rules.move_max_bytes,
                )
            )
        except StoreUnavailable:
            if self._shards is not None:
                for shard, ids in _ids_by_shard(published).items():
                    self._shards.unsettled(shard, ids)  # settled before the next claim
            raise
        lost = settled.lost | sent.fenced
        if self._shards is not None:
            for shard, ids in _ids_by_shard(published).items():
                if shard not in lost:
                    self._shards.confirm(shard, ids)
        if lost:
            # Those rows stay pending for the shard's new owner (published again: at least
            # once; with kafka_transactions, the new owner settles them from the progress
            # topic instead).
            shard_of = {row.id: row.shard for row in sent.rows}
            published = [row for row in published if row.shard not in lost]
            failures = [f for f in failures if shard_of[f.id] not in lost]
        parked = sum(1 for f in failures if f.park)
        unavailable = [i for i, e in sent.errors.items() if e.reason in TOPIC_UNAVAILABLE]
        by_topic: Counter[str] = Counter()
        if unavailable:
            topic_of = {row.id: row.topic for row in sent.rows}
            by_topic.update(rules.topics.kafka_topic(topic_of[i]) for i in unavailable)
        return BatchOutcome(
            claimed=len(sent.rows),
            published=len(published),
            retried=len(failures) - parked,
            parked=parked,
            held_back=sent.held_back,
            fatal_producer_error=sent.fatal,
            full=sent.full,
            lost=lost,
            acked_at=time.time(),
            published_created_at=list(map(_CREATED_AT, published)),
            published_by_topic=dict(Counter(map(attrgetter("topic"), published))),
            failures_by_reason=dict(Counter(e.reason for e in sent.errors.values())),
            unavailable_by_topic=dict(by_topic),
        )
