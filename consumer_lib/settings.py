"""How a consumer runs: ConsumerSettings, checked when it is made."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from consumer_lib.errors import ConsumerConfigError
from outbox_core.kafka_security import KafkaSecurity, KafkaSecurityError

MissingIdPolicy = Literal["dead_letter", "process", "skip"]

# Kafka's rule for topic names; a client sending to any other only times out.
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def valid_topic_name(name: str) -> bool:
    return bool(_TOPIC_NAME.match(name)) and name not in (".", "..")


@dataclass(frozen=True)
class ConsumerSettings:
    bootstrap_servers: str
    group_id: str
    dead_letter_topic: str | None = None  # default: "<topic>.DLT"
    max_attempts: int = 5  # handler failures of one record before it is dead-lettered
    backoff_base_s: float = 0.2
    backoff_max_s: float = 10.0
    missing_event_id: MissingIdPolicy = "dead_letter"
    unhandled: Literal["skip", "dead_letter"] = "skip"
    max_concurrent_partitions: int = 4
    max_records: int = 500  # records per fetch (getmany), all partitions together
    # Batch apply: a partition's consecutive records of one fetch share a transaction, up to
    # batch_max_records records and batch_max_bytes of keys and values. batch=False: a
    # transaction per record, for every handler (a handler opts out alone with batch=False).
    batch: bool = True
    batch_max_records: int = 500
    batch_max_bytes: int = 1024 * 1024
    retention_s: float = 30 * 24 * 3600.0
    purge_interval_s: float = 300.0
    purge_batch_size: int = 1000
    shutdown_grace_s: float = 20.0
    client_id: str = "outbox-consumer"
    create_dead_letter_topics: bool = True  # at start, when missing (brokers rarely auto-create)
    # How to talk to Kafka; required: KafkaSecurity(protocol="SSL", ...), or
    # KafkaSecurity.plaintext() to allow an unencrypted connection explicitly.
    security: KafkaSecurity | None = None
    # Ops endpoint (/metrics, /healthz, /readyz); None: off, 0: any free port.
    http_port: int | None = None
    http_host: str = "127.0.0.1"  # 0.0.0.0 to let Prometheus scrape it from outside
    lag_interval_s: float = 5.0  # how often the lag gauges are refreshed (never per scrape)
    stall_after_s: float = 60.0  # /healthz fails when the loop has not ticked for this long

    @classmethod
    def from_env(cls, **defaults: Any) -> ConsumerSettings:
        """From `outbox-consumer run` flags, OUTBOX_CONSUMER_* variables, then `defaults`
        (flat names: group_id=..., kafka_security_protocol=...); consumer_lib.environment."""
        from consumer_lib.environment import settings_from_env

        return settings_from_env(**defaults)

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.DLT"

    def __post_init__(self) -> None:
        if self.security is None:
            raise ConsumerConfigError(
                "choose the Kafka security: ConsumerSettings(security=KafkaSecurity(protocol="
                '"SSL" or "SASL_SSL", ...)), or security=KafkaSecurity.plaintext() to allow '
                "PLAINTEXT explicitly"
            )
        try:
            self.security.check()
        except KafkaSecurityError as exc:
            raise ConsumerConfigError(f"Kafka security: {exc}") from None
        if self.dead_letter_topic is not None and not valid_topic_name(self.dead_letter_topic):
            raise ConsumerConfigError(
                f"dead_letter_topic {self.dead_letter_topic!r} is not a valid Kafka topic name "
                "(1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"
            )
        if not self.group_id.strip():
            raise ConsumerConfigError("group_id must not be empty")
        if self.max_attempts < 1 or self.max_concurrent_partitions < 1 or self.max_records < 1:
            raise ConsumerConfigError(
                "max_attempts, max_concurrent_partitions and max_records must be at least 1"
            )
        if self.batch_max_records < 1 or self.batch_max_bytes < 1:
            raise ConsumerConfigError("batch_max_records and batch_max_bytes must be at least 1")
        if self.missing_event_id not in ("dead_letter", "process", "skip"):
            raise ConsumerConfigError("missing_event_id must be dead_letter, process or skip")
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise ConsumerConfigError("http_port must be in 0..65535 (or None for no endpoint)")
        if self.lag_interval_s <= 0 or self.stall_after_s <= 0:
            raise ConsumerConfigError("lag_interval_s and stall_after_s must be positive")


def kafka_options(settings: ConsumerSettings) -> dict[str, Any]:
    """The security options every Kafka client of the consumer is made with."""
    assert settings.security is not None  # checked in ConsumerSettings
    return settings.security.client_options()
