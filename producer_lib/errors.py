"""producer_lib's errors. The root, OutboxError, is the project's (outbox_core.errors), as
are the database, configuration and migration errors; the event errors are producer_lib's.

`retriable` tells the caller whether running the same transaction again may succeed
(a lost connection, a serialization failure, a deadlock) or never will (bad input).
"""

from __future__ import annotations

from outbox_core.errors import (
    ConfigurationError,
    DatabaseError,
    MigrationError,
    NoTransaction,
    OutboxError,
    UnknownMigration,
    UnsupportedConnection,
)


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


class ReservedHeader(InvalidHeader):
    """A user header uses a name the outbox sets itself (event_id, event_type,
    content-type, traceparent, tracestate, or one starting with outbox- or ce_), in any
    case."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message, field="headers")
        self.name = name


class IdempotencyConflict(OutboxError):
    """The idempotency key was already used for an event with a different body."""

    def __init__(self, message: str, *, idempotency_key: str, existing_event_id: str) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key
        self.existing_event_id = existing_event_id


class ShardCountMismatch(ConfigurationError):
    """Outbox(shard_count=...) disagrees with the database's outbox_settings."""

    def __init__(self, configured: int, recorded: int) -> None:
        self.configured = configured
        self.recorded = recorded
        super().__init__(
            f"Outbox(shard_count={configured}) but the database records shard_count "
            f"{recorded} (outbox_settings): leave shard_count out to use the database's; "
            "producers and relays must agree"
        )


class DuplicateEventId(InvalidEvent):
    """An event with this event_id is already in the outbox."""

    def __init__(self) -> None:
        super().__init__("an event with this event_id already exists", field="event_id")


__all__ = [
    "ConfigurationError",
    "DatabaseError",
    "DuplicateEventId",
    "IdempotencyConflict",
    "InvalidEvent",
    "InvalidHeader",
    "MigrationError",
    "NoTransaction",
    "OutboxError",
    "PayloadTooLarge",
    "SerializationError",
    "ShardCountMismatch",
    "UnknownMigration",
    "UnsupportedConnection",
]
