"""The relay's Kafka producer settings (OUTBOX_KAFKA_*): the unsafe choices (acks other
than all, idempotence off) are refused at load, not discovered in production."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from outbox_core.kafka_names import TOPIC_RULE, legal_topic
from outbox_core.settings import SettingsGroup

# Kafka's rule for a transactional id is only "not empty"; the relay's are made of the
# prefix and a shard number, and kept to characters every ACL tool quotes the same way.
_TRANSACTIONAL_ID = r"^[A-Za-z0-9._-]{1,200}$"


class KafkaSettings(SettingsGroup):
    """The producer's settings (OUTBOX_KAFKA_*); security is a group of its own."""

    env_infix: ClassVar[str] = "kafka_"

    bootstrap_servers: str | None = Field(
        default=None,
        description="Comma-separated host:port list of Kafka brokers (required with transport=kafka).",
    )
    acks: str = Field(
        default="all",
        description="Producer acks. Only 'all' is accepted: anything else can lose events.",
    )
    enable_idempotence: bool = Field(
        default=True,
        description="Idempotent producer. Must stay on: it keeps per-partition order on retry.",
    )
    client_id: str = Field(default="outbox-relay", description="Kafka client.id.")
    max_request_size: int = Field(
        default=1_048_576,
        ge=1024,
        description="Largest record batch sent in bytes; larger events are parked at once.",
    )
    max_batch_bytes: int | None = Field(
        default=None,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest record batch per partition. Default: each topic's "
        "max.message.bytes, read from the broker (the broker refuses a larger batch as a "
        "whole), or 16 KiB where it cannot be read.",
    )
    linger_ms: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="How long a claim's record batch waits before it is sent (ms). A claim is "
        "already a batch: 0 sends it at once.",
    )
    request_timeout_ms: int = Field(
        default=30_000, ge=1000, description="Producer request timeout (ms)."
    )
    compression_type: Literal["none", "gzip"] = Field(
        default="none", description="Record compression."
    )
    transactions: bool = Field(
        default=False,
        description="Exactly once into Kafka: each cycle's records go in one Kafka "
        "transaction with a progress record per shard, from one transactional producer "
        "per replica (docs/design.md, Exactly once). Every consumer of the topics must "
        "read with isolation.level=read_committed. Kafka transport only.",
    )
    transactional_id_prefix: str = Field(
        default="outbox-relay",
        pattern=_TRANSACTIONAL_ID,
        description="With transactions: a replica's producer has the transactional id "
        "<prefix>-replica-<replica id>. One prefix per outbox database: two relay fleets "
        "sharing one could fence each other. Letters, digits, '.', '_', '-'.",
    )
    progress_topic: str = Field(
        default="outbox-relay-progress",
        description="With transactions: the compacted topic each transaction's progress "
        "record goes to (which outbox rows it covers), read by a shard's next owner. "
        "Created at start-up when missing (cleanup.policy=compact); an existing topic "
        "must be compacted. One per outbox database.",
    )
    transaction_timeout_ms: int = Field(
        default=6000,
        ge=1000,
        le=900_000,
        description="With transactions: the broker aborts a transaction open longer "
        "(a relay paused mid-send), so read_committed consumers wait at most this long "
        "behind it. Below lease_ttl_s.",
    )

    @field_validator("progress_topic")
    @classmethod
    def _progress_topic(cls, value: str) -> str:
        if not legal_topic(value):
            raise ValueError(f"not a legal Kafka topic name ({TOPIC_RULE})")
        return value

    def transactional_id(self, replica: str) -> str:
        """The transactional id of replica `replica`'s producer: a new owner of one of
        its shards initialises it to fence it."""
        return f"{self.transactional_id_prefix}-replica-{replica}"

    @field_validator("acks")
    @classmethod
    def _acks(cls, value: str) -> str:
        if value.strip().lower() not in ("all", "-1"):
            raise ValueError(
                f"acks={value!r} is unsafe: a broker failure could lose acked events; use 'all'"
            )
        return "all"

    @field_validator("enable_idempotence")
    @classmethod
    def _idempotence(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "enable_idempotence=false is unsafe: retries could reorder or duplicate a key's events"
            )
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is None:
            return None
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        for host in hosts:
            name, sep, port = host.rpartition(":")
            if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{host!r} is not host:port")
        if not hosts:
            raise ValueError("at least one host:port is required")
        return ",".join(hosts)
