"""The Redis connection both the relay (stream sink) and consumer_lib (stream source) use:
its settings group, the client built from it, and the one place redis-py's exceptions
become ours (RedisFailure, with `retriable`).

The password is a SecretStr, preferably read from a file (a mounted secret); `secrets()`
lists it for the log redaction. redis-py is an optional extra (`outbox-relay[redis]`):
it is imported only when a client is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from outbox_core.errors import ConfigurationError, OutboxError
from outbox_core.kafka_security import read_secret
from outbox_core.logs import url_secrets
from outbox_core.settings import SettingsGroup

if TYPE_CHECKING:
    from redis.asyncio import Redis


class RedisFailure(OutboxError):
    """A Redis command failed. retriable: the connection or the server (loading, busy,
    read-only replica) failed and the same command may succeed later; otherwise the
    command itself was refused (wrong type, no such group, bad arguments)."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class RedisSettings(SettingsGroup):
    """The Redis connection (OUTBOX_REDIS_*)."""

    env_infix: ClassVar[str] = "redis_"

    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="redis:// (or rediss:// for TLS) URL of the server; put no password in it "
        "(use redis_password_file).",
    )
    tls: bool = Field(default=False, description="Connect with TLS (as a rediss:// URL does).")
    tls_ca_file: str | None = Field(
        default=None, description="CA bundle that signed the server's certificate (TLS)."
    )
    username: str | None = Field(default=None, description="ACL user name (Redis 6+).")
    password: SecretStr | None = Field(
        default=None, description="ACL password (prefer redis_password_file)."
    )
    password_file: str | None = Field(
        default=None, description="File holding the ACL password (a mounted secret)."
    )
    socket_timeout_s: float = Field(
        default=10.0, gt=0, description="Timeout of one command's reply (s)."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    def resolved_password(self) -> str | None:
        inline = self.password.get_secret_value() if self.password else None
        return read_secret(inline, self.password_file, "redis password")

    def secrets(self) -> list[str]:
        """Values to keep out of every log line: the password and any in the URL."""
        password = self.resolved_password()
        return [*url_secrets(self.url), *([password] if password else [])]


def connect(settings: RedisSettings) -> Redis:
    """A redis.asyncio client (lazy: it connects on its first command)."""
    try:
        from redis.asyncio import Redis
    except ImportError:
        raise ConfigurationError(
            "the Redis transport needs redis-py: pip install 'outbox-relay[redis]'"
        ) from None

    options: dict[str, Any] = {
        "username": settings.username,
        "password": settings.resolved_password(),
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
        "decode_responses": False,
    }
    if settings.tls and not settings.url.startswith("rediss://"):
        options["ssl"] = True
    if settings.tls_ca_file:
        options["ssl_ca_certs"] = settings.tls_ca_file
    return Redis.from_url(settings.url, **options)


def classify(exc: BaseException) -> RedisFailure:
    """redis-py's exception as ours; the message keeps the first line only (no URLs)."""
    from redis import exceptions as e

    retriable = isinstance(
        exc,
        e.ConnectionError
        | e.TimeoutError
        | e.BusyLoadingError
        | e.ReadOnlyError
        | e.TryAgainError
        | e.ClusterDownError
        | OSError,
    )
    if isinstance(exc, e.AuthenticationError | e.AuthorizationError):
        retriable = False
    first = (str(exc).splitlines() or [""])[0]
    return RedisFailure(f"{type(exc).__name__}: {first}", retriable=retriable)
