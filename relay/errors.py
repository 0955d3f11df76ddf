"""The relay's errors: a branch of the project's one root (outbox_core.errors.OutboxError);
`retriable` says whether trying again later can succeed."""

from __future__ import annotations

from outbox_core.errors import (
    ConfigurationError,
    DatabaseError,
    OutboxError,
    StartupParameterRefused,
)


class RelayError(OutboxError):
    """Root of the relay's own errors."""


class RelayConfigError(RelayError, ConfigurationError):
    """The configuration is invalid or unsafe; the relay refuses to start (exit code 2)."""


class PoolerRefused(RelayConfigError):
    """A connection pooler (PgBouncer) refused the startup parameter the relay passes its
    session settings in: it must be told it runs behind one (exit code 2)."""

    def __init__(self, refused: StartupParameterRefused) -> None:
        super().__init__(
            f"{refused}. The relay is configured for a direct connection and passes its "
            "session settings (statement_timeout, lock_timeout, ...) as the options startup "
            "parameter, which PgBouncer refuses (or, told to ignore it, drops): set OUTBOX_DATABASE_POOLER=transaction "
            "(--database-pooler transaction) to set them in each transaction instead "
            "(docs/poolers.md)"
        )


class StartupRefused(RelayError):
    """The database is not in a state this relay can work on (exit code 2)."""


class PublishingStopped(RelayError):
    """The producer cannot be started again (a non-retriable error, e.g. refused
    authorization): this replica cannot publish, so it released its leases for the other
    replicas and stopped (exit code 5, for the orchestrator to restart it)."""


class StoreUnavailable(RelayError, DatabaseError):
    """A store call failed: the database could not be reached or the statement failed.
    Always retried: state lives in the database, and the next round re-reads it."""

    def __init__(self, message: str) -> None:
        DatabaseError.__init__(self, message, retriable=True)
