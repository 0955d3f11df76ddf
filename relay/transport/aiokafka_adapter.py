"""The relay's only use of aiokafka internals, kept here so an upgrade breaks one module
(and tests/unit/test_aiokafka_adapter.py, pinned to constraints.txt's aiokafka) instead of
the publisher.

Record batches. The publisher builds its own: one per partition and claim, as large as
that topic accepts. aiokafka's public `create_batch()` gives builders of one size for
every topic (the producer's max_batch_size), so the builder is made here with the size
the topic needs and the producer's own compression, which aiokafka keeps only on its
accumulator.

Topic metadata. aiokafka's `partitions_for(topic)` waits until the topic shows up in the
cluster metadata, up to the request timeout: for a topic that does not exist (auto-create
off) that is 30 s, and a cycle that asked for it sent nothing meanwhile, for any topic.
`TopicDirectory` answers from the metadata the producer already has, at once, and looks
up the topics it has not seen in a task of its own, beside the cycle: one metadata round
trip tells a topic that exists from one that does not, or that this client may not see.
The metadata calls it makes (the client's topic set, a forced update, the cluster's
partitions and unauthorized topics) are aiokafka's client internals.

Transactions. The wait before a transaction's partitions are asked for again, after the
previous commit's markers were not written yet, is aiokafka's constant
(`quick_transaction_retries`). A transaction's partitions (`transaction_partitions`),
adding partitions before any record is sent to them (`add_to_transaction`: the
coordinator's round trip then runs beside the claim) and the error that left the
producer unusable (`transaction_failure`) are its transaction manager's; the futures a
stopped sender leaves failed (`read_left_failures`) are its accumulator's, read as
outbox_core.kafka_clients reads them when it stops a producer without delivering.

Everything else (send_batch, the builder's append and close, the transaction calls) is
aiokafka's public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from enum import Enum
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.producer import sender as aiokafka_sender
from aiokafka.producer.message_accumulator import BatchBuilder

from outbox_core.kafka_clients import read_batch_failures
from outbox_core.kafka_names import legal_topic

__all__ = [
    "BatchBuilder",
    "TopicDirectory",
    "TopicState",
    "add_to_transaction",
    "quick_transaction_retries",
    "read_left_failures",
    "record_batch",
    "transaction_failure",
    "transaction_partitions",
]

log = logging.getLogger("relay.topics")


def record_batch(producer: AIOKafkaProducer, size: int) -> BatchBuilder:
    """An empty record batch of at most `size` bytes, compressed as `producer` compresses."""
    compression: Any = producer._message_accumulator._compression_type
    # A transactional producer's batches carry the transactional flag, or the broker
    # would take them outside the transaction (and read_committed readers at once).
    txn = producer._txn_manager
    transactional = txn is not None and txn.transactional_id is not None
    return BatchBuilder(size, compression, is_transactional=transactional)


# A transaction's first AddPartitionsToTxn, sent right after the previous transaction's
# commit, often meets the coordinator still writing that commit's markers
# (CONCURRENT_TRANSACTIONS); aiokafka asks again after BACKOFF_OVERRIDE, 20 ms. A relay
# begins its shard's next transaction at once, so that wait was most of a cycle: measured
# on the test broker, a transaction of one record and its progress record took 24.6 ms
# (median) with 20 ms, 9.1 with 5 ms, 3.6 with 2 ms (docs/decisions/0029).
TRANSACTION_RETRY_S = 0.002


def quick_transaction_retries() -> None:
    """Ask again after TRANSACTION_RETRY_S when a transaction's partitions meet the
    previous commit still being written (process-wide: aiokafka keeps it as a constant)."""
    aiokafka_sender.BACKOFF_OVERRIDE = TRANSACTION_RETRY_S


class TopicState(Enum):
    """What the directory knows of a topic it has no partitions for."""

    LOOKING = "looking"  # not seen yet: being looked up beside the cycle
    MISSING = "missing"  # not on the cluster (until the next look)
    DENIED = "denied"  # this client may not describe it (an ACL)
    INVALID = "invalid"  # not a legal Kafka topic name: it can never exist


LOOK_AGAIN_S = 10.0  # a missing or denied topic is looked up again after this
MAX_TRACKED = 10_000  # topics remembered as missing/denied (rows can name any topic)
_SAY = {
    TopicState.MISSING: "topic not found on the cluster (auto-create off?); its events back "
    "off and are parked after max_attempts",
    TopicState.DENIED: "topic not authorized for this relay (Describe ACL); its events back off",
    TopicState.INVALID: "not a legal Kafka topic name; its events are parked",
}


class TopicDirectory:
    """Each topic's partitions, from the producer's metadata, without waiting: a topic the
    metadata lacks is looked up by a named task beside the cycle (restarted if it fails),
    and reported LOOKING until then, then MISSING or DENIED for LOOK_AGAIN_S before the
    next look. Each change of a topic's verdict is logged, naming the topic."""

    def __init__(self, producer: AIOKafkaProducer, *, name: str, timeout_s: float) -> None:
        self._producer = producer
        self._name = name
        self._timeout_s = timeout_s
        self._verdicts: dict[str, tuple[TopicState, float]] = {}  # topic -> (state, until)
        self._wanted: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def partitions(self, topic: str) -> list[int] | TopicState:
        """The topic's partitions, sorted, or why there are none now (never waits)."""
        found = self._producer.client.cluster.partitions_for_topic(topic)
        if found:
            if topic in self._verdicts:
                self._found(topic)
            return sorted(found)
        verdict = self._verdicts.get(topic)
        if verdict is not None and (
            verdict[0] is TopicState.INVALID or verdict[1] > time.monotonic()
        ):
            return verdict[0]
        if not legal_topic(topic):  # judged at once, never looked up again and again
            self._judge(topic, TopicState.INVALID)
            return TopicState.INVALID
        self._want(topic)
        return verdict[0] if verdict is not None else TopicState.LOOKING

    async def looked(self, timeout_s: float) -> None:
        """Wait for the lookup under way, at most timeout_s (never longer: a topic that
        is slow to answer must not hold the cycle)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout_s)

    def forget(self, topic: str) -> None:
        """The broker answered a send as if the topic were gone: look it up again."""
        self._verdicts.pop(topic, None)
        self._want(topic)

    def _want(self, topic: str) -> None:
        self._wanted.add(topic)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._supervised(), name=self._name)

    def _judge(self, topic: str, state: TopicState) -> None:
        before = self._verdicts.get(topic)
        if before is None and len(self._verdicts) >= MAX_TRACKED:
            self._verdicts.pop(next(iter(self._verdicts)))
        self._verdicts[topic] = (state, time.monotonic() + LOOK_AGAIN_S)
        if before is None or before[0] is not state:
            log.warning(_SAY[state], extra={"topic": topic})

    def _found(self, topic: str) -> None:
        if self._verdicts.pop(topic, None) is not None:
            log.info("topic found on the cluster; its events go out", extra={"topic": topic})

    async def _supervised(self) -> None:
        while True:
            try:
                await self._look()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("topic lookup failed; restarting", extra={"task": self._name})
                await asyncio.sleep(1.0)

    async def _look(self) -> None:
        client = self._producer.client
        while self._wanted:
            self._wake.clear()
            topics, self._wanted = self._wanted, set()
            for topic in topics:
                client.add_topic(topic)
            try:
                updated = await asyncio.wait_for(client.force_metadata_update(), self._timeout_s)
            except Exception as exc:
                updated, error = False, repr(exc)
            else:
                error = "no broker answered"
            if not updated:
                # The cluster is away: the topics keep their verdicts (LOOKING: their rows
                # wait, uncharged) and are looked up again.
                log.debug("topic metadata not read", extra={"error": error})
                self._wanted |= topics
                await asyncio.sleep(1.0)
                continue
            cluster = client.cluster
            for topic in topics:
                if cluster.partitions_for_topic(topic):
                    self._found(topic)
                    continue
                denied = topic in cluster.unauthorized_topics
                self._judge(topic, TopicState.DENIED if denied else TopicState.MISSING)
            # Missing topics leave the set the client keeps asking for (it logs an error
            # for each on every refresh, and rows can name any number of topics); an
            # empty set would mean "every topic", so the last one stays.
            gone = {t for t in topics if t in self._verdicts}
            kept = set(client._topics) - gone
            if gone and kept:
                client.set_topics(kept)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def transaction_partitions(producer: AIOKafkaProducer) -> frozenset[TopicPartition]:
    """The partitions of the producer's open transaction (added, or being added)."""
    txn = producer._txn_manager
    if txn is None:
        return frozenset()
    return frozenset(txn._txn_partitions) | frozenset(txn.partitions_to_add())


def transaction_failure(producer: AIOKafkaProducer) -> BaseException | None:
    """What put the producer's transaction manager in its fatal state, or None: the
    broker fenced it (an AddPartitionsToTxn or EndTxn answered with a newer epoch) and
    aiokafka's sender stopped on it. Such a producer can no longer send, commit or abort
    (aiokafka refuses the abort with an AssertionError); only a new one, initialised
    again, can go on."""
    txn = producer._txn_manager
    if txn is None or not txn.is_fatal_error():
        return None
    ended: asyncio.Future[None] = txn.wait_for_transaction_end()
    if ended.done() and not ended.cancelled():
        error = ended.exception()
        if error is not None:
            return error
    unknown: BaseException = kafka_errors.IllegalStateError("the transaction manager failed")
    return unknown


def read_left_failures(producer: AIOKafkaProducer) -> None:
    """Read the errors a stopped sender left on futures no caller awaits (its transaction
    manager's and each batch's drain waiter): unread, each is logged as an ERROR with
    its traceback when collected, though the relay handled the failure."""
    transaction_failure(producer)
    read_batch_failures(producer)


def add_to_transaction(producer: AIOKafkaProducer, partitions: frozenset[TopicPartition]) -> None:
    """Have the producer add these partitions to its open transaction now, before any
    record goes to them: the sender asks the coordinator at once (one request), and a
    record sent to them later waits for nothing more."""
    txn = producer._txn_manager
    assert txn is not None
    assert txn.is_in_transaction()
    for tp in partitions:
        txn.maybe_add_partition_to_txn(tp)
