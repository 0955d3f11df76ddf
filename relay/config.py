"""Relay settings: environment variables OUTBOX_<NAME>, or the same names as CLI flags.

The settings are grouped (database, kafka, kafka_security, redis, redis_stream, topics,
formats, batch, tenants, probe, leases, purge, gauges, notify, http, log); each part of the relay receives
only its group. Names stay flat for users: OUTBOX_KAFKA_SECURITY_PROTOCOL, --lease-ttl-s (outbox_core.settings).
Every field is documented in its group; `outbox-relay run --help` prints the same text.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from outbox_core.kafka_security import KafkaSecuritySettings
from outbox_core.logs import url_secrets
from outbox_core.redis_connection import RedisSettings
from outbox_core.settings import (
    FlatField,
    FlatSettings,
    SettingsGroup,
    flat_fields,
    setting_problems,
)
from outbox_core.sharding import MAX_SHARDS
from relay.control.floors import FloorSettings
from relay.control.gauges import GaugeSettings
from relay.control.horizon import HorizonSettings
from relay.control.leases import LeaseSettings
from relay.control.notify import NotifySettings
from relay.control.purge import PurgeSettings
from relay.database import DatabaseSettings
from relay.errors import RelaySettingsError
from relay.pipeline.loop import ProbeSettings
from relay.pipeline.step import BatchRules, BatchSettings, TopicSettings
from relay.pipeline.tenants import TenantSettings
from relay.transport.format_settings import FormatSettings, RecordFormat
from relay.transport.formats import RecordShapes
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.redis_streams import RedisStreamSettings

ENV_PREFIX = "OUTBOX_"


class HttpSettings(SettingsGroup):
    env_infix: ClassVar[str] = "http_"

    enabled: bool = Field(
        default=True, description="Serve /metrics (Prometheus), /healthz and /readyz over HTTP."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address of the ops endpoint; 0.0.0.0 to let Prometheus scrape it from outside.",
    )
    port: int = Field(
        default=9400, ge=0, le=65535, description="Port of the ops endpoint (0: any free port)."
    )


class LogSettings(SettingsGroup):
    env_infix: ClassVar[str] = "log_"

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level."
    )
    json_lines: bool = Field(
        default=False, alias="json", description="Log one JSON object per line."
    )


class RelaySettings(FlatSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    database: DatabaseSettings
    transport: Literal["kafka", "redis"] = Field(
        default="kafka",
        description="Where events are published: Kafka topics, or Redis streams (redis_* settings).",
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    kafka_security: KafkaSecuritySettings = Field(default_factory=KafkaSecuritySettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    redis_stream: RedisStreamSettings = Field(default_factory=RedisStreamSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    formats: FormatSettings = Field(default_factory=FormatSettings)
    shard_count: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SHARDS,
        description="Number of shards. Unset: the database's (outbox_settings, set by "
        "outbox-relay migrate --shard-count); when set, it must equal the database's.",
    )
    batch: BatchSettings = Field(default_factory=BatchSettings)
    tenants: TenantSettings = Field(default_factory=TenantSettings)
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
    purge: PurgeSettings = Field(default_factory=PurgeSettings)
    shutdown_grace_s: float = Field(
        default=20.0, ge=0, description="On SIGTERM, how long in-flight sends may take to finish."
    )
    healthz_stall_s: float = Field(
        default=300.0,
        ge=0,
        description="/healthz fails when a publish cycle of this replica has settled no row "
        "for this long while rows were due (claimed, not backing off), a transport or "
        "database outage included; 0: never.",
    )
    notify: NotifySettings = Field(default_factory=NotifySettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    gauges: GaugeSettings = Field(default_factory=GaugeSettings)
    claim_floors: FloorSettings = Field(default_factory=FloorSettings)
    horizon: HorizonSettings = Field(default_factory=HorizonSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    def __init__(self, **values: Any) -> None:
        # Declared here, not only on FlatSettings, so type checkers take flat names too.
        super().__init__(**values)

    @model_validator(mode="after")
    def _transport_settings(self) -> RelaySettings:
        if self.transport == "kafka":
            if self.kafka.bootstrap_servers is None:
                raise ValueError("kafka_bootstrap_servers is required with transport=kafka")
            self.kafka_security.check()
            ttl_ms = self.leases.lease_ttl_s * 1000
            if self.kafka.transactions and self.kafka.transaction_timeout_ms >= ttl_ms:
                raise ValueError(
                    "kafka_transaction_timeout_ms (OUTBOX_KAFKA_TRANSACTION_TIMEOUT_MS) must "
                    "be below lease_ttl_s (OUTBOX_LEASE_TTL_S): a transaction of a relay "
                    "paused past its lease must not outlive it"
                )
        elif self.kafka.transactions:
            raise ValueError(
                "kafka_transactions (OUTBOX_KAFKA_TRANSACTIONS) needs transport=kafka: Redis "
                "streams have no transactions across streams to make delivery exactly once"
            )
        elif self.formats.in_use() != {RecordFormat.NATIVE}:
            raise ValueError(
                "record_format and record_formats (OUTBOX_RECORD_FORMAT, "
                "OUTBOX_RECORD_FORMATS): a record format is a Kafka record's shape; with "
                "transport=redis every topic is native"
            )
        return self

    def secrets(self) -> list[str]:
        """Secret values to keep out of every log line and traceback."""
        security = self.kafka_security.resolve()
        return [
            *url_secrets(self.database.database_url.get_secret_value()),
            *(s for s in (security.sasl_password, security.ssl_key_password) if s),
            *(self.redis.secrets() if self.transport == "redis" else ()),
        ]

    def batch_rules(self) -> BatchRules:
        return BatchRules(
            owner=self.leases.replica_id,
            batch=self.batch,
            topics=self.topics,
            max_request_size=self.kafka.max_request_size,
            keep=self.purge.keep,
            move_max_bytes=self.purge.retention_move_max_bytes,
            turns=self.tenants.turns(),
            bulk_rows=self.tenants.bulk_rows(),
            shape_of=RecordShapes(self.formats).shape_of,
        )


def load_settings(**overrides: object) -> RelaySettings:
    """Environment plus overrides (CLI flags win); errors become one readable RelaySettingsError.

    Input values are never echoed: they may hold secrets.
    """
    try:
        return RelaySettings(**overrides)
    except ValidationError as exc:
        problems = setting_problems(RelaySettings, exc)
        raise RelaySettingsError(problems, ENV_PREFIX) from None


def settings_fields() -> list[FlatField]:
    return list(flat_fields(RelaySettings))


def unknown_env_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """OUTBOX_* variables that name no setting (a typo, or a renamed setting): the relay
    runs without them, so it says which they are."""
    known = {field.env(ENV_PREFIX) for field in settings_fields()}
    names = os.environ if environ is None else environ
    return sorted(n for n in names if n.upper().startswith(ENV_PREFIX) and n.upper() not in known)


def field_help() -> list[tuple[str, str, str, str]]:
    """(flag, env, description, default) per field, for the docs' settings table."""
    return [
        (f.flag, f.env(ENV_PREFIX), f.info.description or "", f.default_text)
        for f in settings_fields()
    ]
