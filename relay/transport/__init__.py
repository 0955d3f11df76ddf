"""Where events go: the Publisher protocol, what it reports per record, and the three
publishers (Kafka, Redis Streams, the in-memory double). The names below are this
package's public entry points (bench/ and embedding code import them from here)."""

from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.kafka import KafkaPublisher
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.memory import MemoryPublisher
from relay.transport.protocol import ACKED, HELD, Acked, Held, Outcome, Publisher
from relay.transport.records import OutgoingRecord, to_records
from relay.transport.redis_streams import RedisStreamPublisher, RedisStreamSettings

__all__ = [
    "ACKED",
    "HELD",
    "Acked",
    "FailureReason",
    "Held",
    "KafkaPublisher",
    "KafkaSettings",
    "MemoryPublisher",
    "Outcome",
    "OutgoingRecord",
    "PublishFailed",
    "Publisher",
    "RedisStreamPublisher",
    "RedisStreamSettings",
    "TransportUnavailable",
    "to_records",
]
