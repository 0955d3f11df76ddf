"""How the relay and consumers talk to Kafka: PLAINTEXT only when chosen, SSL, SASL.

Secrets (the SASL password, the private key's password) come from the environment or,
preferably, from files (Kubernetes secrets mounted as files); they are SecretStr in
settings and never printed. Hostname verification is on unless turned off explicitly.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from aiokafka.helpers import create_ssl_context
from pydantic import Field, SecretStr, model_validator

from outbox_core.errors import ConfigurationError
from outbox_core.settings import SettingsGroup

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class KafkaSecurityError(ConfigurationError):
    """The Kafka security settings are incomplete or contradictory."""


def read_secret(value: str | None, path: str | None, what: str) -> str | None:
    """A secret given inline or in a file (the file wins; a trailing newline is dropped)."""
    if path:
        try:
            return Path(path).read_text().rstrip("\r\n")
        except OSError as exc:
            raise KafkaSecurityError(f"cannot read {what} file {path}: {exc.strerror}") from None
    return value


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: Protocol | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Mechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None

    def __repr__(self) -> str:  # never show the secrets
        return (
            f"KafkaSecurity(protocol={self.protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
            f"sasl_username={self.sasl_username!r}, ssl_cafile={self.ssl_cafile!r})"
        )

    @classmethod
    def plaintext(cls) -> KafkaSecurity:
        """An unencrypted, unauthenticated connection: for local development and tests."""
        return cls(protocol="PLAINTEXT")

    def settings_values(self) -> dict[str, Any]:
        """The same options as KafkaSecuritySettings values (resolve() is the way back)."""
        return {
            "security_protocol": self.protocol,
            "ssl_cafile": self.ssl_cafile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_key_password": self.ssl_key_password,
            "ssl_check_hostname": self.ssl_check_hostname,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password": self.sasl_password,
        }

    def check(self) -> None:
        """Raises KafkaSecurityError naming what is missing or wrong."""
        if self.protocol is None:
            raise KafkaSecurityError(
                "choose the Kafka security protocol: SSL or SASL_SSL, or PLAINTEXT / "
                "SASL_PLAINTEXT to allow an unencrypted connection explicitly"
            )
        if self.protocol not in PROTOCOLS:
            raise KafkaSecurityError(f"unknown security protocol {self.protocol!r}")
        sasl = self.protocol.startswith("SASL_")
        if sasl and not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
            raise KafkaSecurityError(
                f"{self.protocol} needs a SASL mechanism, a username and a password (or password file)"
            )
        if not sasl and (self.sasl_mechanism or self.sasl_username or self.sasl_password):
            raise KafkaSecurityError(f"SASL settings are given but the protocol is {self.protocol}")
        uses_ssl = self.protocol in ("SSL", "SASL_SSL")
        files = {"CA": self.ssl_cafile, "certificate": self.ssl_certfile, "key": self.ssl_keyfile}
        if not uses_ssl and any(files.values()):
            raise KafkaSecurityError(f"SSL files are given but the protocol is {self.protocol}")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise KafkaSecurityError(
                "a client certificate needs its key, and a key its certificate"
            )
        for what, path in files.items():
            if path and not Path(path).is_file():
                raise KafkaSecurityError(f"SSL {what} file {path} does not exist")

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.ssl_cafile,
            certfile=self.ssl_certfile,
            keyfile=self.ssl_keyfile,
            password=self.ssl_key_password,
        )
        if not self.ssl_check_hostname:
            context.check_hostname = False
        return context

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka producers, consumers and admin clients."""
        self.check()
        options: dict[str, Any] = {"security_protocol": self.protocol}
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.sasl_mechanism:
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        return options


class KafkaSecuritySettings(SettingsGroup):
    """The security options as settings (OUTBOX_KAFKA_SECURITY_PROTOCOL, ...): secrets as
    SecretStr, or as files (mounted secrets), resolved into a KafkaSecurity."""

    env_infix: ClassVar[str] = "kafka_"
    # How errors name these settings for the user (a consumer's carry its own prefix).
    env_names: ClassVar[str] = (
        "OUTBOX_KAFKA_SECURITY_PROTOCOL, OUTBOX_KAFKA_SSL_*, OUTBOX_KAFKA_SASL_*"
    )

    security_protocol: Protocol | None = Field(
        default=None,
        description="SSL or SASL_SSL; PLAINTEXT or SASL_PLAINTEXT only when chosen explicitly. Required.",
    )
    ssl_cafile: str | None = Field(
        default=None, description="PEM file of the CA that signed the brokers' certificates."
    )
    ssl_certfile: str | None = Field(
        default=None, description="PEM client certificate (mutual TLS)."
    )
    ssl_keyfile: str | None = Field(default=None, description="PEM key of the client certificate.")
    ssl_key_password: SecretStr | None = Field(
        default=None, description="Password of the client key (prefer the _file setting)."
    )
    ssl_key_password_file: str | None = Field(
        default=None, description="File holding the client key's password."
    )
    ssl_check_hostname: bool = Field(
        default=True, description="Verify that the broker certificate names the host connected to."
    )
    sasl_mechanism: Mechanism | None = Field(
        default=None, description="SASL mechanism for SASL_SSL / SASL_PLAINTEXT."
    )
    sasl_username: str | None = Field(default=None, description="SASL username.")
    sasl_password: SecretStr | None = Field(
        default=None, description="SASL password (prefer kafka_sasl_password_file)."
    )
    sasl_password_file: str | None = Field(
        default=None, description="File holding the SASL password (a mounted secret)."
    )

    @model_validator(mode="after")
    def _complete(self) -> KafkaSecuritySettings:
        if self == KafkaSecuritySettings.model_construct():
            # Nothing chosen: only a Kafka transport needs a choice (checked by its user).
            return self
        self.check()
        return self

    def check(self) -> None:
        """ValueError naming the settings when the options are incomplete or contradictory."""
        try:
            self.resolve().check()
        except KafkaSecurityError as exc:
            raise ValueError(f"Kafka security ({self.env_names}): {exc}") from None

    def resolve(self) -> KafkaSecurity:
        """The options with secrets read (files win over inline values)."""
        sasl = self.sasl_password.get_secret_value() if self.sasl_password else None
        key = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
        return KafkaSecurity(
            protocol=self.security_protocol,
            ssl_cafile=self.ssl_cafile,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
            ssl_key_password=read_secret(key, self.ssl_key_password_file, "SSL key password"),
            ssl_check_hostname=self.ssl_check_hostname,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=read_secret(sasl, self.sasl_password_file, "SASL password"),
        )
