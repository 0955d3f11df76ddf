"""One relay step over every shard a replica holds, in two halves: `send_batch` claims a
batch (up to batch_size rows per shard, in one statement), hands it to Kafka and waits for
the acks; `settle_batch` marks it (one statement). No loop, no sleep.

`publish_batch` is both halves in turn. The cycle (cycle.py) runs the next send while the
previous settle is in flight. Nothing is written for a shard whose lease no longer
carries its token (fenced settle).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar, Literal

from pydantic import Field

from outbox_core.backoff import delay_s
from outbox_core.settings import SettingsGroup
from relay.errors import KafkaUnavailable, PublishFailed
from relay.kafka_errors import classify
from relay.loop_share import pieces
from relay.publisher import HELD, OutgoingRecord, Publisher
from relay.records import to_records
from relay.store import ClaimedRow, Failure, Store, TenantTurns

MAX_ERROR_CHARS = 2000


class BatchSettings(SettingsGroup):
    """How rows are claimed and what a failure costs them."""

    batch_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Rows claimed per shard per cycle (one cycle claims for every held shard).",
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
    turns: TenantTurns | None = None  # fair_tenants: claims take turns between tenants
    bulk_rows: int | None = None  # with turns: a tenant's backlog drains in a lane of its own

    @property
    def lanes(self) -> int:
        """The cycle's loops (cycle.py): quick and bulk with turns and bulk_rows, else one."""
        return 2 if self.turns is not None and self.bulk_rows is not None else 1

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
    latency_s: float | None = None  # commit to ack of the oldest row published
    published_by_topic: dict[str, int] = field(default_factory=dict, repr=False)
    failures_by_reason: dict[str, int] = field(default_factory=dict, repr=False)


_ID = attrgetter("id")  # per published row: map() with it runs in C

_REASON = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,63}$")


def failure_reason(error: PublishFailed) -> str:
    """The error's class ("KafkaTimeoutError", "RecordTooLarge"), a metric label: never the
    free text after it, which varies per row and would grow the label set without bound."""
    head = str(error).split(":", 1)[0].strip()
    return head if _REASON.match(head) else "other"


def backoff_s(attempts_before: int, settings: BatchSettings) -> float:
    """Exponential with jitter, from the attempts persisted on the row."""
    return delay_s(
        attempts_before, base_s=settings.backoff_base_s, max_s=settings.backoff_max_s, jitter=True
    )


def _failure(row: ClaimedRow, error: PublishFailed, settings: BatchSettings) -> Failure:
    park = (not error.retriable) or row.attempts + 1 >= settings.max_attempts
    return Failure(row.id, str(error)[:MAX_ERROR_CHARS], backoff_s(row.attempts, settings), park)


@dataclass
class Sent:
    """A batch claimed and sent, its acks in, not settled yet (send_batch's result)."""

    tokens: dict[int, int]  # the leases of the shards its rows came from
    rows: list[ClaimedRow]
    published: list[ClaimedRow]
    errors: dict[int, PublishFailed]  # by row id
    failures: list[Failure]  # the errors charged to their rows
    held_back: int
    fatal: bool
    full: bool

    @property
    def in_flight(self) -> list[int]:
        """Rows the settle will write: a claim made meanwhile must leave them out."""
        return [*map(_ID, self.published), *(f.id for f in self.failures)]

    def blocked_keys(self, policy: str) -> set[str]:
        """Keys whose later rows must wait for this settle: under block_key, those with a
        failure the database does not know of yet."""
        if policy != "block_key" or not self.failures:
            return set()
        by_id = {row.id: row for row in self.rows}
        return {by_id[f.id].key for f in self.failures}


async def send_batch(
    tokens: Mapping[int, int],
    *,
    store: Store,
    publisher: Publisher,
    rules: BatchRules,
    after: Sent | None = None,
) -> Sent | None:
    """Claim for these shards, send, wait for the acks; None when nothing was due. after:
    the previous batch, acked and being settled: its rows are left out of the claim and
    its failed keys held back (their failures are not in the database yet)."""
    settings = rules.batch
    block = settings.failure_policy == "block_key"
    in_flight = after.in_flight if after is not None else []
    rows = await store.claim(
        list(tokens), settings.batch_size, settings.failure_policy, in_flight, rules.turns
    )
    if not rows:
        return None
    failed_keys = after.blocked_keys(settings.failure_policy) if after is not None else set()
    errors: dict[int, PublishFailed] = {}
    limit = rules.max_request_size
    topic_of = {t: rules.topics.kafka_topic(t) for t in {row.topic for row in rows}}
    records: list[OutgoingRecord] = []
    oversized: dict[int, int] = {}
    async for start, piece in pieces(rows):  # a large claim gives the other lane turns
        built, too_large = to_records(piece, topic_of, limit)
        records += built
        oversized.update((start + i, size) for i, size in too_large.items())
    sending: list[ClaimedRow] = rows
    if oversized or (block and failed_keys):  # rare: most claims send every row
        screened: list[OutgoingRecord] = []
        sending = []
        for i, row in enumerate(rows):
            if block and row.key in failed_keys:
                continue  # stays pending; the next claim waits behind its failed row
            if i in oversized:
                # Known before sending: refuse it here so nothing later of its key goes out.
                errors[row.id] = PublishFailed(
                    f"RecordTooLarge: record of {oversized[i]} bytes exceeds "
                    f"kafka_max_request_size ({limit})",
                    retriable=False,
                )
                failed_keys.add(row.key)
                continue
            sending.append(row)
            screened.append(records[i])
        records = screened
    held_back = len(rows) - len(sending) - len(errors)
    handed = await publisher.enqueue_batch(records)
    # Records of one record batch share one ack: wait on each ack once, with its rows.
    batches: dict[int, tuple[Awaitable[None], list[ClaimedRow]]] = {}
    fatal = False
    for row, item in zip(sending, handed, strict=True):
        if item is HELD:
            held_back += 1  # waits for its key's earlier rows to be acked: next claim
            continue
        if isinstance(item, PublishFailed):
            fatal = fatal or item.fatal
            if block and row.key in failed_keys:
                held_back += 1  # refused behind an earlier failed row of its key: not charged
                continue
            errors[row.id] = item
            failed_keys.add(row.key)
            continue
        batch = batches.get(id(item))
        if batch is None:
            batches[id(item)] = (item, [row])  # type: ignore[assignment]
        else:
            batch[1].append(row)
    results = await asyncio.gather(*(ack for ack, _ in batches.values()), return_exceptions=True)
    published: list[ClaimedRow] = []
    # A key's rows of one claim share one ack (one record batch): they are published or
    # failed together, so none is acked after an earlier one of its key failed.
    for (_, members), result in zip(batches.values(), results, strict=True):
        if not isinstance(result, BaseException):
            published += members
            continue
        if isinstance(result, asyncio.CancelledError):
            raise result
        err = classify(result)
        fatal = fatal or err.fatal
        for row in members:
            errors[row.id] = err
            failed_keys.add(row.key)
    # A broken producer is not the rows' fault: they stay pending, uncharged. When nothing
    # got through and every failure is the transport's, Kafka as a whole is away: nothing
    # is charged and the cycle backs off. A topic-level error (unknown topic) is charged
    # to its rows even then, so a missing topic cannot hold the whole shard back.
    if errors and not published and all(e.transport or e.fatal for e in errors.values()):
        raise KafkaUnavailable(next(iter(errors.values())))
    by_id = {row.id: row for row in rows} if errors else {}
    per_shard = Counter(map(attrgetter("shard"), rows))
    return Sent(
        tokens={s: t for s, t in tokens.items() if s in per_shard},
        rows=rows,
        published=published,
        errors=errors,
        failures=[_failure(by_id[i], e, settings) for i, e in errors.items() if not e.fatal],
        held_back=held_back,
        fatal=fatal,
        full=max(per_shard.values()) >= rules.shard_full_at,
    )


async def settle_batch(sent: Sent, *, store: Store, rules: BatchRules) -> BatchOutcome:
    """Mark the published rows and record the failures, fenced per shard."""
    published, failures = sent.published, sent.failures
    settled = await store.settle(
        rules.owner, sent.tokens, list(map(_ID, published)), failures, rules.keep
    )
    if settled.lost:
        # Those rows stay pending for the shard's new owner (published again: at least once).
        lost = settled.lost
        shard_of = {row.id: row.shard for row in sent.rows}
        published = [row for row in published if row.shard not in lost]
        failures = [f for f in failures if shard_of[f.id] not in lost]
    parked = sum(1 for f in failures if f.park)
    return BatchOutcome(
        claimed=len(sent.rows),
        published=len(published),
        retried=len(failures) - parked,
        parked=parked,
        held_back=sent.held_back,
        fatal_producer_error=sent.fatal,
        full=sent.full,
        lost=settled.lost,
        latency_s=(
            time.time() - min(map(attrgetter("created_at"), published)) if published else None
        ),
        published_by_topic=dict(Counter(map(attrgetter("topic"), published))),
        failures_by_reason=dict(Counter(failure_reason(e) for e in sent.errors.values())),
    )


async def publish_batch(
    tokens: Mapping[int, int],
    *,
    store: Store,
    publisher: Publisher,
    rules: BatchRules,
) -> BatchOutcome:
    """One whole step: send_batch, then settle_batch."""
    sent = await send_batch(tokens, store=store, publisher=publisher, rules=rules)
    if sent is None:
        return BatchOutcome(0)
    return await settle_batch(sent, store=store, rules=rules)
