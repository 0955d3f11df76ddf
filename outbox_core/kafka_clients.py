"""Stopping aiokafka's clients while their broker may be away, for every part of the
project that runs one: the relay's publisher and its progress reader, a consumer's records
and its dead letters. It uses aiokafka's internals (the sender's task, the accumulator's
batches, the consumer's client), kept to this module so an upgrade breaks it here
(tests/integration/test_kafka_broker_away.py shows each on the real broker).

Two things go wrong in aiokafka's own stops while the broker is away:
- A producer's `stop()` waits until every batch it holds is delivered, which has no end:
  a relay replacing a broken producer, or either side told to stop, would wait out the
  outage. Neither counts on a stop to deliver: an unsent relay batch leaves its rows
  pending, and an unsent dead letter leaves its record's offset uncommitted, so both go out
  again.
- A consumer's `stop()` cancels its fetch tasks and awaits each; one caught in its retry
  backoff lets that CancelledError out of `stop()`, to a caller nobody cancelled, which
  then ends as if cancelled (its other clean-up skipped), with the client left open.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors


async def stop_unsent_dropped(producer: AIOKafkaProducer) -> None:
    """Stop the producer; the batches it has not delivered fail instead of being waited for.

    The sender goes first: cancelled, it lets each produce request in flight end (one
    attempt, within request_timeout_ms) and sends nothing more, so no batch of this
    producer can reach the broker behind a replacement's records. Then the stop waits for
    nothing, and the batches left fail, ending every wait on them."""
    sender = producer._sender
    task = None if sender is None else sender.sender_task
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task})
    with contextlib.suppress(Exception):
        await producer.stop()
    accumulator = producer._message_accumulator
    # A batch sent once and queued again still has the callback that takes it out of the
    # pending set when it ends (aiokafka adds it on the first send only): back in that
    # set, failing it does not make the callback raise.
    for queue in accumulator._batches.values():
        accumulator._pending_batches.update(b for b in queue if b.retry_count)
    accumulator.fail_all(
        kafka_errors.KafkaConnectionError("the producer was stopped with this batch unsent")
    )
    read_batch_failures(producer)
    if task is not None and not task.cancelled():
        task.exception()  # read: a sender that failed already reported its batches


def read_batch_failures(producer: AIOKafkaProducer) -> None:
    """Read the errors a stopped sender left on its batches' futures no caller awaits
    (each batch's drain waiter, and a batch whose sender gave up on it): unread, each is
    logged as an ERROR with its traceback when collected, though its failure was handled."""
    accumulator = producer._message_accumulator
    batches = [b for queue in accumulator._batches.values() for b in queue]
    for batch in [*batches, *accumulator._pending_batches]:
        for waiter in (batch.future, batch._drain_waiter):
            if waiter.done() and not waiter.cancelled():
                waiter.exception()


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """The consumer's stop, without the cancellation it can let out (see above): swallowed
    unless this task is being cancelled itself, and then the client closed, which that
    stop did not reach."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        await consumer._client.close()
