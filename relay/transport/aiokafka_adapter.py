"""The relay's only use of aiokafka internals, kept here so an upgrade breaks one module
(and tests/unit/test_aiokafka_adapter.py, pinned to constraints.txt's aiokafka) instead of
the publisher.

The publisher builds its own record batches: one per partition and claim, as large as
that topic accepts. aiokafka's public `create_batch()` gives builders of one size for
every topic (the producer's max_batch_size), so the builder is made here with the size
the topic needs and the producer's own compression, which aiokafka keeps only on its
accumulator. Everything else (partitions_for, send_batch, the builder's append and close)
is aiokafka's public API.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.producer.message_accumulator import BatchBuilder

__all__ = ["BatchBuilder", "record_batch"]


def record_batch(producer: AIOKafkaProducer, size: int) -> BatchBuilder:
    """An empty record batch of at most `size` bytes, compressed as `producer` compresses."""
    compression: Any = producer._message_accumulator._compression_type
    return BatchBuilder(size, compression, is_transactional=False)
