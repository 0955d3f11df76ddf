"""Emit outbox events inside the caller's database transaction.

from producer_lib import Outbox
outbox = Outbox()
with Session(engine) as session, session.begin():
    session.add(order)
    outbox.emit(session, topic="orders", key=str(order.id),
                event_type="OrderPlaced", payload={"id": order.id})
"""

from outbox_core.migrate import MigrationReport, migrate
from producer_lib.emitter import EventEmitter
from producer_lib.errors import (
    ConfigurationError,
    DatabaseError,
    DuplicateEventId,
    IdempotencyConflict,
    InvalidEvent,
    InvalidHeader,
    MigrationError,
    NoTransaction,
    OutboxError,
    PayloadTooLarge,
    ReservedHeader,
    SerializationError,
    ShardCountMismatch,
    UnknownMigration,
    UnsupportedConnection,
)
from producer_lib.events import Event
from producer_lib.outbox import Outbox
from producer_lib.recorder import RecordedEvent, RecordingOutbox
from producer_lib.serialization import JsonSerializer, Serialized, Serializer

__all__ = [
    "ConfigurationError",
    "DatabaseError",
    "DuplicateEventId",
    "Event",
    "EventEmitter",
    "IdempotencyConflict",
    "InvalidEvent",
    "InvalidHeader",
    "JsonSerializer",
    "MigrationError",
    "MigrationReport",
    "NoTransaction",
    "Outbox",
    "OutboxError",
    "PayloadTooLarge",
    "RecordedEvent",
    "RecordingOutbox",
    "ReservedHeader",
    "SerializationError",
    "Serialized",
    "Serializer",
    "ShardCountMismatch",
    "UnknownMigration",
    "UnsupportedConnection",
    "migrate",
]
