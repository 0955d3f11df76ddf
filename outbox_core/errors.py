"""The one exception root of the project: every library's errors derive from OutboxError.

`retriable` says whether doing the same thing again later may succeed (a lost connection,
a serialization failure, a broker briefly away) or never will (bad input, bad settings).
producer_lib raises these and its own subclasses; relay and consumer_lib have their own
branches (RelayError, ConsumerError) under the same root.
"""

from __future__ import annotations


class OutboxError(Exception):
    """Root of every exception the project raises."""

    retriable: bool = False


class ConfigurationError(OutboxError, ValueError):
    """A setting is invalid, or disagrees with what the database records."""


class DatabaseError(OutboxError):
    """The database driver failed; the driver's exception is the __cause__."""

    def __init__(
        self,
        message: str,
        *,
        retriable: bool,
        sqlstate: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.sqlstate = sqlstate
        self.errno = errno  # MariaDB's error number (its drivers do not pass the SQLSTATE on)


class StartupParameterRefused(DatabaseError):
    """The server refused a connection's startup parameter (`options`): in practice a
    connection pooler such as PgBouncer, which passes only the parameters it tracks. No
    retry helps; `parameter` is the one it named, when it named one."""

    def __init__(self, message: str, *, parameter: str | None) -> None:
        super().__init__(message, retriable=False)
        self.parameter = parameter


class SessionSettingsDropped(StartupParameterRefused):
    """The server runs none of the settings a connection gave in `options`: a pooler in
    between took the parameter and dropped it (PgBouncer's ignore_startup_parameters)."""


class UniqueViolation(DatabaseError):
    """A row with the same unique key exists. `constraint` says which key, as the database
    names it: Postgres's constraint name (`outbox_events_event_id_key`), SQLite's
    `table.column` list (`outbox_events.event_id`), MariaDB's key name (the same as
    Postgres's; `PRIMARY` for a primary key); None when the driver gave no name."""

    def __init__(
        self,
        message: str,
        *,
        constraint: str | None,
        sqlstate: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message, retriable=False, sqlstate=sqlstate, errno=errno)
        self.constraint = constraint


class MigrationError(OutboxError):
    """The schema cannot be brought to the version this code expects (or is missing)."""


class UnknownMigration(MigrationError):
    """The database records migrations this code does not know: it is newer, or foreign."""


class NoTransaction(OutboxError):
    """The connection is in autocommit mode with no open transaction to join."""


class UnsupportedConnection(OutboxError, TypeError):
    """An object that is not a supported connection or session was given."""
