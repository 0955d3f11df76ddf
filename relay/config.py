"""Relay settings: environment variables OUTBOX_<FIELD>, or the same names as CLI flags.

Every field is documented here; `outbox-relay run --help` prints the same text.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from producer_lib.connect import DatabaseUrl
from producer_lib.errors import ConfigurationError
from producer_lib.sharding import MAX_SHARDS
from relay.errors import RelayConfigError
from relay.kafka_security import KafkaSecurity, KafkaSecurityError, read_secret

ENV_PREFIX = "OUTBOX_"


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class RelaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    database_url: SecretStr = Field(
        description="Outbox database: postgresql://user:pass@host/db or sqlite:///path.db",
    )
    kafka_bootstrap_servers: str = Field(
        description="Comma-separated host:port list of Kafka brokers.",
    )
    kafka_acks: str = Field(
        default="all",
        description="Producer acks. Only 'all' is accepted: anything else can lose events.",
    )
    kafka_enable_idempotence: bool = Field(
        default=True,
        description="Idempotent producer. Must stay on: it keeps per-partition order on retry.",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = (
        Field(
            default=None,
            description="SSL or SASL_SSL; PLAINTEXT or SASL_PLAINTEXT only when chosen explicitly. Required.",
        )
    )
    kafka_ssl_cafile: str | None = Field(
        default=None, description="PEM file of the CA that signed the brokers' certificates."
    )
    kafka_ssl_certfile: str | None = Field(
        default=None, description="PEM client certificate (mutual TLS)."
    )
    kafka_ssl_keyfile: str | None = Field(
        default=None, description="PEM key of the client certificate."
    )
    kafka_ssl_key_password: SecretStr | None = Field(
        default=None, description="Password of the client key (prefer the _file setting)."
    )
    kafka_ssl_key_password_file: str | None = Field(
        default=None, description="File holding the client key's password."
    )
    kafka_ssl_check_hostname: bool = Field(
        default=True, description="Verify that the broker certificate names the host connected to."
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism for SASL_SSL / SASL_PLAINTEXT."
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL username.")
    kafka_sasl_password: SecretStr | None = Field(
        default=None, description="SASL password (prefer kafka_sasl_password_file)."
    )
    kafka_sasl_password_file: str | None = Field(
        default=None, description="File holding the SASL password (a mounted secret)."
    )
    kafka_client_id: str = Field(default="outbox-relay", description="Kafka client.id.")
    kafka_max_request_size: int = Field(
        default=1_048_576,
        ge=1024,
        description="Largest record batch sent in bytes; larger events are parked at once.",
    )
    kafka_max_batch_bytes: int = Field(
        default=16_384,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Record batch size per partition (Kafka's batch.size). Larger sends more per "
        "round trip, but keep it below every topic's max.message.bytes: the broker refuses a "
        "batch as a whole.",
    )
    kafka_linger_ms: int = Field(
        default=5, ge=0, le=1000, description="Producer linger before a batch is sent (ms)."
    )
    kafka_request_timeout_ms: int = Field(
        default=30_000, ge=1000, description="Producer request timeout (ms)."
    )
    kafka_compression_type: Literal["none", "gzip"] = Field(
        default="none", description="Record compression."
    )
    topic_prefix: str = Field(default="", description="Prepended to every row's topic.")
    topic_map: dict[str, str] = Field(
        default_factory=dict,
        description='JSON object mapping a row topic to a Kafka topic, e.g. {"orders":"prod.orders"}.',
    )
    shard_count: int = Field(
        default=16,
        ge=1,
        le=MAX_SHARDS,
        description="Number of shards; must equal the database's (outbox-relay migrate --shard-count).",
    )
    batch_size: int = Field(default=500, ge=1, le=10_000, description="Rows claimed per batch.")
    poll_interval_s: float = Field(
        default=0.05,
        gt=0,
        description="First wait after an empty batch; doubles up to idle_interval_s.",
    )
    idle_interval_s: float = Field(
        default=1.0, gt=0, description="Longest wait between polls of an idle shard."
    )
    lease_ttl_s: float = Field(
        default=10.0,
        ge=1.0,
        description="Shard lease length on the database clock; a crashed replica's shards move after it.",
    )
    heartbeat_interval_s: float = Field(
        default=2.0, gt=0, description="How often leases and membership are renewed."
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
    retention: Literal["delete", "keep"] = Field(
        default="delete",
        description="delete published rows at once, or keep them for retention_period_s.",
    )
    retention_period_s: float = Field(
        default=7 * 24 * 3600.0, ge=0, description="How long kept rows stay (retention=keep)."
    )
    idempotency_retention_s: float = Field(
        default=7 * 24 * 3600.0, ge=0, description="How long idempotency keys are remembered."
    )
    purge_interval_s: float = Field(default=30.0, gt=0, description="Time between purge rounds.")
    purge_batch_size: int = Field(
        default=1000, ge=1, description="Rows deleted per purge statement."
    )
    shutdown_grace_s: float = Field(
        default=20.0, ge=0, description="On SIGTERM, how long in-flight sends may take to finish."
    )
    listen_notify: bool = Field(
        default=False,
        description="Postgres: LISTEN for producers' coalesced NOTIFY hints (never required).",
    )
    notify_channel: str = Field(
        default="outbox_events", pattern=r"^[a-z_][a-z0-9_]{0,62}$", description="NOTIFY channel."
    )
    replica_id: str = Field(
        default_factory=default_replica_id,
        min_length=1,
        max_length=200,
        description="This replica's name in the lease table (default host-pid-random).",
    )
    sqlite_wait_for_lock: bool = Field(
        default=False,
        description="SQLite: wait for the relay already running on the file instead of exiting.",
    )
    http_enabled: bool = Field(
        default=True, description="Serve /metrics (Prometheus), /healthz and /readyz over HTTP."
    )
    http_host: str = Field(
        default="127.0.0.1",
        description="Address of the ops endpoint; 0.0.0.0 to let Prometheus scrape it from outside.",
    )
    http_port: int = Field(
        default=9400, ge=0, le=65535, description="Port of the ops endpoint (0: any free port)."
    )
    gauges_interval_s: float = Field(
        default=15.0,
        gt=0,
        description="How often pending/parked/oldest-age gauges are refreshed (never per scrape).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level."
    )
    log_json: bool = Field(default=False, description="Log one JSON object per line.")

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: SecretStr) -> SecretStr:
        try:
            DatabaseUrl.parse(value.get_secret_value())
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("kafka_acks")
    @classmethod
    def _acks(cls, value: str) -> str:
        if value.strip().lower() not in ("all", "-1"):
            raise ValueError(
                f"acks={value!r} is unsafe: a broker failure could lose acked events; use 'all'"
            )
        return "all"

    @field_validator("kafka_enable_idempotence")
    @classmethod
    def _idempotence(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "enable_idempotence=false is unsafe: retries could reorder or duplicate a key's events"
            )
        return value

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        for host in hosts:
            name, sep, port = host.rpartition(":")
            if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{host!r} is not host:port")
        if not hosts:
            raise ValueError("at least one host:port is required")
        return ",".join(hosts)

    @model_validator(mode="after")
    def _kafka_security(self) -> RelaySettings:
        try:
            self.kafka_security.check()
        except KafkaSecurityError as exc:
            raise ValueError(
                f"Kafka security (OUTBOX_KAFKA_SECURITY_PROTOCOL, OUTBOX_KAFKA_SSL_*, "
                f"OUTBOX_KAFKA_SASL_*): {exc}"
            ) from None
        return self

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The security settings with secrets resolved (files win over inline values)."""
        sasl = self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else None
        key = (
            self.kafka_ssl_key_password.get_secret_value() if self.kafka_ssl_key_password else None
        )
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            ssl_cafile=self.kafka_ssl_cafile,
            ssl_certfile=self.kafka_ssl_certfile,
            ssl_keyfile=self.kafka_ssl_keyfile,
            ssl_key_password=read_secret(key, self.kafka_ssl_key_password_file, "SSL key password"),
            ssl_check_hostname=self.kafka_ssl_check_hostname,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=read_secret(sasl, self.kafka_sasl_password_file, "SASL password"),
        )

    @model_validator(mode="after")
    def _intervals(self) -> RelaySettings:
        if self.heartbeat_interval_s * 2 > self.lease_ttl_s:
            raise ValueError(
                f"heartbeat_interval_s ({ENV_PREFIX}HEARTBEAT_INTERVAL_S) must be at most half "
                f"of lease_ttl_s ({ENV_PREFIX}LEASE_TTL_S), or leases expire between renewals"
            )
        if self.poll_interval_s > self.idle_interval_s:
            raise ValueError(
                f"poll_interval_s ({ENV_PREFIX}POLL_INTERVAL_S) must not exceed "
                f"idle_interval_s ({ENV_PREFIX}IDLE_INTERVAL_S)"
            )
        return self

    def secrets(self) -> list[str]:
        """Secret values to keep out of every log line and traceback."""
        from relay.logs import url_secrets

        security = self.kafka_security
        return [
            *url_secrets(self.database_url.get_secret_value()),
            *(s for s in (security.sasl_password, security.ssl_key_password) if s),
        ]

    @property
    def database(self) -> DatabaseUrl:
        return DatabaseUrl.parse(self.database_url.get_secret_value())

    def kafka_topic(self, row_topic: str) -> str:
        return self.topic_prefix + self.topic_map.get(row_topic, row_topic)


def load_settings(**overrides: object) -> RelaySettings:
    """Environment plus overrides (CLI flags win); errors become one readable RelayConfigError.

    Input values are never echoed: they may hold secrets.
    """
    try:
        return RelaySettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors(include_input=False, include_url=False):
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            env = f"{ENV_PREFIX}{field.upper()}" if err["loc"] else ""
            where = f"{field} ({env})" if env else field
            lines.append(f"  {where}: {err['msg']}")
        raise RelayConfigError("invalid relay configuration:\n" + "\n".join(lines)) from None


def field_help() -> list[tuple[str, str, str, object]]:
    """(flag, env, description, default) per field, for the CLI."""
    out = []
    for name, info in RelaySettings.model_fields.items():
        default: object = info.default if info.default_factory is None else "(generated)"
        if info.is_required():
            default = "(required)"
        if isinstance(default, dict):
            default = json.dumps(default)
        out.append(
            (
                f"--{name.replace('_', '-')}",
                f"{ENV_PREFIX}{name.upper()}",
                info.description or "",
                default,
            )
        )
    return out
