"""How a consumer runs: ConsumerSettings, one pydantic model with one set of bounds.

The same model is made in code, ConsumerSettings(group_id="billing", ...), and from the
environment and `outbox-consumer run` flags, ConsumerSettings.from_env(...)
(consumer_lib.environment): a value is accepted or refused the same way whichever way it
comes. Names are flat, as the relay's are (outbox_core.settings): the Kafka security is
the `kafka_security` group, given in code as security=KafkaSecurity(...) or by its flat
names (kafka_security_protocol=...), from the environment as
OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL and its siblings.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import SettingsConfigDict

from consumer_lib.errors import ConsumerConfigError
from outbox_core.kafka_names import TOPIC_RULE, legal_topic
from outbox_core.kafka_security import KafkaSecurity, KafkaSecuritySettings
from outbox_core.record_formats import DEBEZIUM_ID_HEADER, DEBEZIUM_TYPE_HEADER
from outbox_core.settings import FlatSettings, SettingProblem, setting_problems

ENV_PREFIX = "OUTBOX_CONSUMER_"
MissingIdPolicy = Literal["dead_letter", "process", "skip"]

# Counts and sizes beyond this are a typo, not a setting.
_MAX_INT = 2**31 - 1
# A duration past ten years is a typo too; far sooner than a float overflows, Postgres
# refuses the interval (the purge's `now() - retention_s * interval '1 second'`).
_MAX_SECONDS = 10 * 365 * 24 * 3600.0
# group_id is in the primary key of every processed_events row, whose index entries
# Postgres refuses past about 2.7 kB; client_id travels in every Kafka request header.
_MAX_NAME_CHARS = 255


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    return value


def _topic_name(value: str) -> str:
    if not legal_topic(value):
        raise ValueError(f"not a Kafka topic name ({TOPIC_RULE})")
    return value


def _no_bool(value: Any) -> Any:
    # pydantic takes True for 1 in code, while the environment's "True" is no number: a
    # bool is refused both ways.
    if isinstance(value, bool):
        raise PydanticCustomError("bool_type", "a number is expected, not a boolean")
    return value


def _header_name(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not hold NUL")
    return value


Text = Annotated[str, AfterValidator(_not_blank)]
Name = Annotated[str, Field(max_length=_MAX_NAME_CHARS), AfterValidator(_not_blank)]
TopicName = Annotated[str, AfterValidator(_topic_name)]
HeaderName = Annotated[
    str, Field(max_length=_MAX_NAME_CHARS), AfterValidator(_not_blank), AfterValidator(_header_name)
]
NotBool = BeforeValidator(_no_bool)
Count = Annotated[int, Field(ge=1, le=_MAX_INT), NotBool]
# A wait of 0 would make the loop it paces spin.
Seconds = Annotated[float, Field(gt=0, le=_MAX_SECONDS, allow_inf_nan=False), NotBool]


class ConsumerKafkaSecurity(KafkaSecuritySettings):
    env_names: ClassVar[str] = (
        "security=KafkaSecurity(...) or KafkaSecurity.plaintext() in code; "
        "OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL, OUTBOX_CONSUMER_KAFKA_SSL_*, "
        "OUTBOX_CONSUMER_KAFKA_SASL_*"
    )


class ConsumerSettingsError(ConsumerConfigError):
    """Settings refused: `problems` holds each refused setting and what is wrong with it
    (SettingFault), the same whether it was given in code, the environment or a flag."""

    def __init__(self, problems: Sequence[SettingProblem]) -> None:
        self.problems = tuple(problems)
        lines = [problem.line(ENV_PREFIX) for problem in self.problems]
        super().__init__("invalid consumer configuration:\n" + "\n".join(lines))


class ConsumerSettings(FlatSettings):
    """Every setting of a consumer; see docs/consumer.md for the table of them."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)
    # Settings written in code are what the code says: the environment and flags reach a
    # consumer only through from_env, where they win over the values in code.
    reads_environment: ClassVar[bool] = False

    bootstrap_servers: Text = Field(description="Kafka brokers, host:port,...")
    group_id: Name = Field(
        description="The consumer group (also the dedup scope); at most 255 characters."
    )
    kafka_security: ConsumerKafkaSecurity = Field(default_factory=ConsumerKafkaSecurity)
    dead_letter_topic: TopicName | None = Field(
        default=None,
        description="Where poison records go, a Kafka topic name; unset: <topic>.DLT.",
    )
    max_attempts: Count = Field(
        default=5, description="Handler failures of one record before it is dead-lettered."
    )
    backoff_base_s: Seconds = Field(
        default=0.2,
        description="First retry delay (seconds), doubled at each failure; above 0, or a "
        "failing handler or an unreachable database would be retried in a tight loop.",
    )
    backoff_max_s: Seconds = Field(default=10.0, description="Longest retry delay (seconds).")
    missing_event_id: MissingIdPolicy = Field(
        default="dead_letter",
        description="A record without an event id (no event_id header, and neither a "
        "CloudEvent nor a Debezium record): dead_letter, process or skip.",
    )
    debezium_id_header: HeaderName = Field(
        default=DEBEZIUM_ID_HEADER,
        description="The header a Debezium outbox record (EventRouter) carries its event id "
        "in, for records without event_id, ce_id or a CloudEvents content type.",
    )
    debezium_type_header: HeaderName = Field(
        default=DEBEZIUM_TYPE_HEADER,
        description="The header a Debezium outbox record carries its event type in "
        "(table.fields.additional.placement).",
    )
    unhandled: Literal["skip", "dead_letter"] = Field(
        default="skip", description="A record no handler is registered for: skip or dead_letter."
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="What the consumer reads of transactional topics (a relay run with "
        "kafka_transactions): read_committed reads only committed transactions' records, "
        "each once; read_uncommitted also reads those of aborted ones (duplicates).",
    )
    max_concurrent_partitions: Count = Field(
        default=4, description="Partitions applied at the same time."
    )
    max_records: Count = Field(default=500, description="Records per fetch, all partitions.")
    batch: bool = Field(
        default=True,
        description="Apply a partition's consecutive records of a fetch in one transaction "
        "(off: one each; a handler opts out alone with batch=False).",
    )
    batch_max_records: Count = Field(default=500, description="Records in one transaction.")
    batch_max_bytes: Count = Field(
        default=1024 * 1024, description="Bytes of keys and values in one transaction."
    )
    retention_s: Seconds = Field(
        default=30 * 24 * 3600.0,
        description="How long processed_events rows are kept: longer than any replay window, "
        "or a replayed event is applied again.",
    )
    purge_interval_s: Seconds = Field(default=300.0, description="How often they are purged.")
    purge_batch_size: Count = Field(default=1000, description="Rows deleted per purge statement.")
    shutdown_grace_s: Annotated[float, NotBool] = Field(
        default=20.0,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="On SIGTERM, how long the records in hand may take to finish (0: none).",
    )
    client_id: Name = Field(default="outbox-consumer", description="Kafka client id.")
    create_dead_letter_topics: bool = Field(
        default=True,
        description="Create missing dead-letter topics at start (brokers rarely auto-create).",
    )
    http_port: Annotated[int, NotBool] | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of /metrics, /healthz and /readyz (0: any free port); unset: off.",
    )
    http_host: Text = Field(
        default="127.0.0.1",
        description="Address of the ops endpoint; 0.0.0.0 to let Prometheus scrape it.",
    )
    lag_interval_s: Seconds = Field(
        default=5.0, description="How often the lag gauges are refreshed (never per scrape)."
    )
    stall_after_s: Seconds = Field(
        default=60.0, description="/healthz fails when the loop has not ticked for this long."
    )

    def __init__(self, **values: Any) -> None:
        # Declared here, not only on FlatSettings, so type checkers take flat names too.
        try:
            super().__init__(**values)
        except ValidationError as exc:
            # from None: the validation error holds the input values, secrets among them.
            raise ConsumerSettingsError(setting_problems(ConsumerSettings, exc)) from None

    @classmethod
    def from_env(cls, **defaults: Any) -> ConsumerSettings:
        """From `outbox-consumer run` flags, OUTBOX_CONSUMER_* variables, then `defaults`
        (flat names: group_id=..., kafka_security_protocol=...); consumer_lib.environment."""
        from consumer_lib.environment import settings_from_env

        return settings_from_env(**defaults)

    @model_validator(mode="before")
    @classmethod
    def _security_object(cls, data: Any) -> Any:
        """security=KafkaSecurity(...), as code gives it, becomes the kafka_security group."""
        if not isinstance(data, dict) or "security" not in data:
            return data
        data = dict(data)
        security = data.pop("security")
        if security is None:
            return data
        if not isinstance(security, KafkaSecurity):
            raise ValueError(f"security must be a KafkaSecurity, not {type(security).__name__}")
        if data.get("kafka_security"):
            raise ValueError("give the Kafka security once: security=... or kafka_security_*")
        data["kafka_security"] = security.settings_values()
        return data

    @model_validator(mode="after")
    def _security_chosen(self) -> ConsumerSettings:
        self.kafka_security.check()  # unlike the relay's, a consumer always talks to Kafka
        return self

    @cached_property
    def security(self) -> KafkaSecurity:
        """The Kafka security options, secrets read (from their files when given so)."""
        return self.kafka_security.resolve()

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.DLT"


def kafka_options(settings: ConsumerSettings) -> dict[str, Any]:
    """The security options every Kafka client of the consumer is made with."""
    return settings.security.client_options()
