"""Every error producer_lib raises derives from OutboxError.

`retriable` tells the caller whether running the same transaction again may succeed
(a lost connection, a serialization failure, a deadlock) or never will (bad input).
"""

from __future__ import annotations


class OutboxError(Exception):
    """Root of producer_lib's exceptions."""

    retriable: bool = False


class InvalidEvent(OutboxError, ValueError):
    """The event cannot be written as given; nothing was written."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class SerializationError(InvalidEvent):
    """The payload could not be turned into bytes by the serializer."""


class PayloadTooLarge(InvalidEvent):
    """The serialized event exceeds the size limit the relay can publish."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message, field="payload")
        self.size = size
        self.limit = limit


class InvalidHeader(InvalidEvent):
    """A user header has a bad name or value, or uses a reserved name."""


class NoTransaction(OutboxError):
    """The connection is in autocommit mode with no open transaction to join."""


class UnsupportedConnection(OutboxError, TypeError):
    """emit was given an object that is not a supported connection or session."""


class IdempotencyConflict(OutboxError):
    """The idempotency key was already used for an event with a different body."""

    def __init__(self, message: str, *, idempotency_key: str, existing_event_id: str) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key
        self.existing_event_id = existing_event_id


class ConfigurationError(OutboxError, ValueError):
    """A setting is invalid, or disagrees with what the database records."""


class MigrationError(OutboxError):
    """The schema cannot be brought to the version this code expects."""


class UnknownMigration(MigrationError):
    """The database records migrations this code does not know: it is newer, or foreign."""


class DatabaseError(OutboxError):
    """The database driver failed; the driver's exception is the __cause__."""

    def __init__(self, message: str, *, retriable: bool, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.sqlstate = sqlstate


class DuplicateEventId(InvalidEvent):
    """An event with this event_id is already in the outbox."""
