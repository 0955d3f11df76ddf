"""The relay's errors: a branch of the project's one root (outbox_core.errors.OutboxError);
`retriable` says whether trying again later can succeed."""

from __future__ import annotations

from outbox_core.errors import ConfigurationError, DatabaseError, OutboxError


class RelayError(OutboxError):
    """Root of the relay's own errors."""


class RelayConfigError(RelayError, ConfigurationError):
    """The configuration is invalid or unsafe; the relay refuses to start (exit code 2)."""


class StartupRefused(RelayError):
    """The database is not in a state this relay can work on (exit code 2)."""


class LeaseLost(RelayError):
    """A fenced write found another token on the shard: this replica must stop it at once."""

    def __init__(self, shard: int) -> None:
        super().__init__(f"lease on shard {shard} was lost")
        self.shard = shard


class StoreUnavailable(RelayError, DatabaseError):
    """A store call failed: the database could not be reached or the statement failed.
    Always retried: state lives in the database, and the next round re-reads it."""

    def __init__(self, message: str) -> None:
        DatabaseError.__init__(self, message, retriable=True)


class PublishFailed(RelayError):
    """Kafka refused or could not take a record.

    transport: the cluster or the connection failed, not this record (a timeout, a lost
    connection, a leader election); such failures are never charged to the row. It
    defaults to `retriable`: a retriable error is the transport's unless classified as
    the topic's (an unknown topic is retriable, yet it is that row's problem).
    """

    def __init__(
        self, message: str, *, retriable: bool, fatal: bool = False, transport: bool | None = None
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.fatal = fatal  # the producer itself is broken and must be recreated
        self.transport = retriable if transport is None else transport


class KafkaUnavailable(RelayError):
    """Every send of a batch failed with a transport error: nothing was settled, and the
    shard backs off instead of charging its rows."""

    retriable = True

    def __init__(self, error: PublishFailed) -> None:
        super().__init__(str(error))
        self.error = error
