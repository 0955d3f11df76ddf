"""The Kafka producer the shard workers share, and its replacement when it breaks.

A fatal producer error (fenced, out-of-order sequence, closed) needs a new producer, not a
new process. Several workers may see the same failure; the generation counter makes sure
only the first of them replaces it, and the others carry on with the new one.
"""

from __future__ import annotations

import asyncio
import logging

from outbox_core.supervisor import Supervisor
from relay.errors import KafkaUnavailable, PublishFailed, StoreUnavailable
from relay.observer import RelayObserver
from relay.publisher import Publisher

log = logging.getLogger("relay.producer")


def retriable(exc: BaseException) -> bool:
    """What the relay retries with backoff: Kafka or the database away, a retriable send."""
    return isinstance(exc, KafkaUnavailable | StoreUnavailable) or (
        isinstance(exc, PublishFailed) and exc.retriable
    )


class ProducerKeeper:
    def __init__(
        self, publisher: Publisher, *, supervisor: Supervisor, observer: RelayObserver
    ) -> None:
        self.publisher = publisher
        self.generation = 0
        self._lock = asyncio.Lock()
        self._sup = supervisor
        self._observer = observer

    async def start(self) -> None:
        """Start the producer, retrying while Kafka is away; raises only once stopping."""
        await self._sup.retry("kafka start", self.publisher.start, retriable)
        self._observer.kafka_started()

    async def recreate(self, seen_generation: int) -> None:
        """Replace the producer that failed at seen_generation (once, whoever asks)."""
        async with self._lock:
            if seen_generation != self.generation:
                return  # another worker already replaced it
            log.warning("kafka producer failed fatally; recreating it")
            self._observer.producer_recreated()
            await self._sup.retry("kafka producer recreate", self.publisher.recreate, retriable)
            self.generation += 1

    async def stop(self) -> None:
        await self.publisher.stop()
