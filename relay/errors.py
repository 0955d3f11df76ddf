"""The relay's errors: a branch of the project's one root (outbox_core.errors.OutboxError);
`retriable` says whether trying again later can succeed."""

from __future__ import annotations

from collections.abc import Sequence

from outbox_core.errors import (
    ConfigurationError,
    DatabaseError,
    OutboxError,
    StartupParameterRefused,
)
from outbox_core.settings import SettingProblem


class RelayError(OutboxError):
    """Root of the relay's own errors."""


class RelayConfigError(RelayError, ConfigurationError):
    """The configuration is invalid or unsafe; the relay refuses to start (exit code 2)."""


class RelaySettingsError(RelayConfigError):
    """Settings refused at load: `problems` holds each refused setting and what is wrong
    with it (SettingFault), the same whether it was given in code, the environment or a
    flag."""

    def __init__(self, problems: Sequence[SettingProblem], prefix: str) -> None:
        self.problems = tuple(problems)
        lines = [problem.line(prefix) for problem in self.problems]
        super().__init__("invalid relay configuration:\n" + "\n".join(lines))


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
