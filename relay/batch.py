"""One relay step over every shard a replica holds: claim a batch (up to batch_size rows
per shard, in one statement), publish it, settle it (in one statement). No loop, no sleep.

`publish_batch` returns what it did; the cycle (cycle.py) decides when to call it again.
It writes nothing for a shard whose lease no longer carries its token (fenced settle).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import re
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, cast

from pydantic import Field

from outbox_core.settings import SettingsGroup
from relay.errors import KafkaUnavailable, PublishFailed
from relay.kafka_errors import classify
from relay.publisher import HELD, OutgoingRecord, Publisher
from relay.store import ClaimedRow, Failure, Store

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


@functools.lru_cache(maxsize=1024)
def _headers(headers_json: str) -> tuple[tuple[str, bytes], ...]:
    # Rows of one producer usually carry the same few header sets: parse each once.
    parsed = json.loads(headers_json)
    return tuple((str(k), str(v).encode()) for k, v in parsed.items())


@functools.lru_cache(maxsize=1024)
def _type_header(event_type: str) -> tuple[str, bytes]:
    return ("event_type", event_type.encode())


def to_record(row: ClaimedRow, topic: str) -> OutgoingRecord:
    return OutgoingRecord(
        topic,
        row.key.encode(),
        row.payload,
        [
            ("event_id", row.event_id.encode()),
            _type_header(row.event_type),
            *_headers(row.headers_json),
        ],
    )


_REASON = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,63}$")


def failure_reason(error: PublishFailed) -> str:
    """The error's class ("KafkaTimeoutError", "RecordTooLarge"), a metric label: never the
    free text after it, which varies per row and would grow the label set without bound."""
    head = str(error).split(":", 1)[0].strip()
    return head if _REASON.match(head) else "other"


def backoff_s(attempts_before: int, settings: BatchSettings) -> float:
    """Exponential with jitter, from the attempts persisted on the row."""
    exponent = min(attempts_before, 1023)  # 2.0**1024 overflows a float (OverflowError)
    ceiling: float = min(settings.backoff_max_s, settings.backoff_base_s * 2.0**exponent)
    return ceiling * random.uniform(0.5, 1.0)


def _failure(row: ClaimedRow, error: PublishFailed, settings: BatchSettings) -> Failure:
    park = (not error.retriable) or row.attempts + 1 >= settings.max_attempts
    return Failure(row.id, str(error)[:MAX_ERROR_CHARS], backoff_s(row.attempts, settings), park)


async def publish_batch(
    tokens: Mapping[int, int],
    *,
    store: Store,
    publisher: Publisher,
    rules: BatchRules,
) -> BatchOutcome:
    settings = rules.batch
    limit = rules.max_request_size
    rows = await store.claim(list(tokens), settings.batch_size, settings.failure_policy)
    if not rows:
        return BatchOutcome(0)
    block = settings.failure_policy == "block_key"
    failed_keys: set[str] = set()
    errors: dict[int, PublishFailed] = {}
    held_back = 0
    outgoing: list[tuple[ClaimedRow, OutgoingRecord]] = []
    topic_of = {t: rules.topics.kafka_topic(t) for t in {row.topic for row in rows}}
    for row in rows:
        if block and row.key in failed_keys:
            held_back += 1  # stays pending; the next claim waits behind its failed row
            continue
        record = to_record(row, topic_of[row.topic])
        # An upper bound first (a character is at most 4 UTF-8 bytes; header names and
        # values never exceed their JSON text; event_id and event_type add 54 bytes plus
        # the type): only rows near the limit pay for the exact size.
        if (
            len(record.value)
            + len(record.key)
            + 4 * (len(row.headers_json) + len(row.event_type))
            + 64
            > limit
            and (size := record.size) > limit
        ):
            # Known before sending: refuse it here so nothing later of its key goes out.
            errors[row.id] = PublishFailed(
                f"RecordTooLarge: record of {size} bytes exceeds kafka_max_request_size ({limit})",
                retriable=False,
            )
            failed_keys.add(row.key)
            continue
        outgoing.append((row, record))
    handed = await publisher.enqueue_batch([record for _, record in outgoing])
    acks: list[tuple[ClaimedRow, Awaitable[None]]] = []
    fatal = False
    for (row, _), item in zip(outgoing, handed, strict=True):
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
        else:
            acks.append((row, cast(Awaitable[None], item)))
    results = await asyncio.gather(*(ack for _, ack in acks), return_exceptions=True)
    published: list[int] = []
    oldest = float("inf")
    # A key's rows of one claim share one ack (one record batch): they are published or
    # failed together, so none is acked after an earlier one of its key failed.
    for (row, _), result in zip(acks, results, strict=True):
        if isinstance(result, BaseException):
            if isinstance(result, asyncio.CancelledError):
                raise result
            err = classify(result)
            errors[row.id] = err
            fatal = fatal or err.fatal
            failed_keys.add(row.key)
        else:
            published.append(row.id)
            oldest = min(oldest, row.created_at)
    # A broken producer is not the rows' fault: they stay pending, uncharged. When nothing
    # got through and every failure is the transport's, Kafka as a whole is away: nothing
    # is charged and the shard backs off. A topic-level error (unknown topic) is charged to
    # its rows even then, so a missing topic cannot hold the whole shard back.
    charged = {i: e for i, e in errors.items() if not e.fatal}
    if errors and not published and all(e.transport or e.fatal for e in errors.values()):
        raise KafkaUnavailable(next(iter(errors.values())))
    by_id = {row.id: row for row in rows}
    published_set = set(published)
    failures = [_failure(by_id[i], err, settings) for i, err in charged.items()]
    claimed_shards = {row.shard for row in rows}
    settled = await store.settle(
        rules.owner,
        {s: t for s, t in tokens.items() if s in claimed_shards},
        published,
        failures,
        rules.keep,
    )
    if settled.lost:
        # Those rows stay pending for the shard's new owner (published again: at least once).
        lost_ids = {row.id for row in rows if row.shard in settled.lost}
        published = [i for i in published if i not in lost_ids]
        failures = [f for f in failures if f.id not in lost_ids]
        published_set = set(published)
    parked = sum(1 for f in failures if f.park)
    by_topic: dict[str, int] = {}
    for row in rows:
        if row.id in published_set:
            by_topic[row.topic] = by_topic.get(row.topic, 0) + 1
    reasons: dict[str, int] = {}
    for err in errors.values():
        reason = failure_reason(err)
        reasons[reason] = reasons.get(reason, 0) + 1
    per_shard: dict[int, int] = {}
    for row in rows:
        per_shard[row.shard] = per_shard.get(row.shard, 0) + 1
    return BatchOutcome(
        claimed=len(rows),
        published=len(published),
        retried=len(failures) - parked,
        parked=parked,
        held_back=held_back,
        fatal_producer_error=fatal,
        full=max(per_shard.values()) >= settings.batch_size,
        lost=settled.lost,
        latency_s=time.time() - oldest if published else None,
        published_by_topic=by_topic,
        failures_by_reason=reasons,
    )
