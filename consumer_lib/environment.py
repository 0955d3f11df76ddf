"""ConsumerSettings from the environment (OUTBOX_CONSUMER_<NAME>) and `outbox-consumer run`
flags of the same names, as the relay's settings are (outbox_core.settings).

    app = ConsumerApp(ConsumerSettings.from_env(group_id="billing"), SqlAlchemyAsync(engine))

What wins, highest first: the command line's flags, the environment, the values given to
from_env in code, the defaults. Secrets (the SASL and key passwords) are SecretStr and are
best read from files (OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE); no input value is ever
echoed in an error.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError
from pydantic_settings import SettingsConfigDict

from consumer_lib.errors import ConsumerConfigError
from consumer_lib.settings import ConsumerSettings, MissingIdPolicy
from outbox_core import logs
from outbox_core.kafka_security import KafkaSecuritySettings
from outbox_core.settings import (
    FlatEnvSource,
    FlatField,
    FlatSettings,
    describe_errors,
    flat_fields,
    nest,
)

ENV_PREFIX = "OUTBOX_CONSUMER_"
# Read by `outbox-consumer run` itself, before any app is imported.
COMMAND_ONLY = ("LOG_LEVEL", "LOG_JSON")
_MAX_INT = 2**31 - 1  # counts and sizes beyond this are a typo, not a setting

_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(ConsumerSettings)
    if f.default is not dataclasses.MISSING
}


def _default(name: str) -> Any:
    return _DEFAULTS[name]


class ConsumerKafkaSecurity(KafkaSecuritySettings):
    env_names: ClassVar[str] = (
        "OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL, OUTBOX_CONSUMER_KAFKA_SSL_*, "
        "OUTBOX_CONSUMER_KAFKA_SASL_*"
    )


class ConsumerEnvironment(FlatSettings):
    """Every field of ConsumerSettings, by its flat name; the Kafka security is its group."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    bootstrap_servers: str = Field(min_length=1, description="Kafka brokers, host:port,...")
    group_id: str = Field(min_length=1, description="The consumer group (also the dedup scope).")
    kafka_security: ConsumerKafkaSecurity = Field(default_factory=ConsumerKafkaSecurity)
    dead_letter_topic: str | None = Field(
        default=_default("dead_letter_topic"),
        min_length=1,
        description="Where poison records go; unset: <topic>.DLT.",
    )
    max_attempts: int = Field(
        default=_default("max_attempts"),
        ge=1,
        le=_MAX_INT,
        description="Handler failures of one record before it is dead-lettered.",
    )
    backoff_base_s: float = Field(
        allow_inf_nan=False,
        default=_default("backoff_base_s"),
        gt=0,
        description="First retry delay (seconds).",
    )
    backoff_max_s: float = Field(
        allow_inf_nan=False,
        default=_default("backoff_max_s"),
        gt=0,
        description="Longest retry delay (seconds).",
    )
    missing_event_id: MissingIdPolicy = Field(
        default=_default("missing_event_id"),
        description="A record without an event_id header: dead_letter, process or skip.",
    )
    unhandled: Literal["skip", "dead_letter"] = Field(
        default=_default("unhandled"),
        description="A record no handler is registered for: skip or dead_letter.",
    )
    max_concurrent_partitions: int = Field(
        default=_default("max_concurrent_partitions"),
        ge=1,
        le=_MAX_INT,
        description="Partitions applied at the same time.",
    )
    max_records: int = Field(
        default=_default("max_records"),
        ge=1,
        le=_MAX_INT,
        description="Records per fetch, all partitions.",
    )
    batch: bool = Field(
        default=_default("batch"),
        description="Apply a partition's consecutive records in one transaction (off: one each).",
    )
    batch_max_records: int = Field(
        default=_default("batch_max_records"),
        ge=1,
        le=_MAX_INT,
        description="Records in one transaction.",
    )
    batch_max_bytes: int = Field(
        default=_default("batch_max_bytes"),
        ge=1,
        le=_MAX_INT,
        description="Bytes of keys and values in one transaction.",
    )
    retention_s: float = Field(
        allow_inf_nan=False,
        default=_default("retention_s"),
        gt=0,
        description="How long processed_events rows are kept (longer than any replay window).",
    )
    purge_interval_s: float = Field(
        allow_inf_nan=False,
        default=_default("purge_interval_s"),
        gt=0,
        description="How often they are purged.",
    )
    purge_batch_size: int = Field(
        default=_default("purge_batch_size"),
        ge=1,
        le=_MAX_INT,
        description="Rows deleted per purge statement.",
    )
    shutdown_grace_s: float = Field(
        allow_inf_nan=False,
        default=_default("shutdown_grace_s"),
        ge=0,
        description="On SIGTERM, how long the records in hand may take to finish.",
    )
    client_id: str = Field(
        default=_default("client_id"), min_length=1, description="Kafka client id."
    )
    create_dead_letter_topics: bool = Field(
        default=_default("create_dead_letter_topics"),
        description="Create missing dead-letter topics at start.",
    )
    http_port: int | None = Field(
        default=_default("http_port"),
        ge=0,
        le=65535,
        description="Port of /metrics, /healthz and /readyz (0: any free port); unset: off.",
    )
    http_host: str = Field(
        default=_default("http_host"),
        description="Address of the ops endpoint; 0.0.0.0 to let Prometheus scrape it.",
    )
    lag_interval_s: float = Field(
        allow_inf_nan=False,
        default=_default("lag_interval_s"),
        gt=0,
        description="How often the lag gauges are refreshed.",
    )
    stall_after_s: float = Field(
        allow_inf_nan=False,
        default=_default("stall_after_s"),
        gt=0,
        description="/healthz fails when the loop has not ticked for this long.",
    )

    def __init__(self, **values: Any) -> None:
        # Declared here, not only on FlatSettings, so type checkers take flat names too.
        super().__init__(**values)

    def consumer_settings(self) -> ConsumerSettings:
        values = self.model_dump(exclude={"kafka_security"})
        return ConsumerSettings(**values, security=self.kafka_security.resolve())


class _Flags:
    """Values of `outbox-consumer run` flags, handed to the from_env call that builds the
    app's settings; `used` tells the command whether one did."""

    values: ClassVar[dict[str, Any]] = {}
    used: ClassVar[bool] = False


def set_flags(values: Mapping[str, Any]) -> None:
    _Flags.values = dict(values)
    _Flags.used = False


def flags_used() -> bool:
    return _Flags.used


def flags_given() -> list[str]:
    return sorted("--" + name.replace("_", "-") for name in _Flags.values)


def settings_from_env(**defaults: Any) -> ConsumerSettings:
    """ConsumerSettings from flags, then OUTBOX_CONSUMER_* variables, then `defaults`.

    `defaults` take the flat names (group_id=..., kafka_security_protocol=...). Raises
    ConsumerConfigError with one line per bad setting, naming its variable.
    """
    unknown = sorted(set(defaults) - {f.name for f in settings_fields()})
    if unknown:
        raise ConsumerConfigError(f"no such consumer setting: {', '.join(unknown)}")
    environ = FlatEnvSource(ConsumerEnvironment, ENV_PREFIX)()
    given = {**defaults, **_flat(environ), **_Flags.values}
    _Flags.used = True
    try:
        # The environment is already folded in: init values alone decide.
        env = ConsumerEnvironment.model_validate(nest(ConsumerEnvironment, given))
    except ValidationError as exc:
        lines = describe_errors(ConsumerEnvironment, exc, ENV_PREFIX)
        raise ConsumerConfigError("invalid consumer configuration:\n" + "\n".join(lines)) from None
    settings = env.consumer_settings()
    if settings.security is not None:
        secrets = (settings.security.sasl_password, settings.security.ssl_key_password)
        logs.add_secrets([s for s in secrets if s])
    return settings


def _flat(nested: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            group = ConsumerEnvironment.model_fields[key].annotation
            infix = getattr(group, "env_infix", "")
            flat.update({infix + sub: v for sub, v in value.items()})
        else:
            flat[key] = value
    return flat


def settings_fields() -> list[FlatField]:
    return list(flat_fields(ConsumerEnvironment))


def unknown_env_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """OUTBOX_CONSUMER_* variables that name no setting (a typo): they are ignored."""
    known = {field.env(ENV_PREFIX) for field in settings_fields()}
    known |= {f"{ENV_PREFIX}{name}" for name in COMMAND_ONLY}
    names = os.environ if environ is None else environ
    return sorted(n for n in names if n.upper().startswith(ENV_PREFIX) and n.upper() not in known)


def env_names_set(environ: Mapping[str, str] | None = None) -> list[str]:
    names = os.environ if environ is None else environ
    return sorted(n for n in names if n.upper().startswith(ENV_PREFIX))
