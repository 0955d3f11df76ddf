"""The schema as SQLAlchemy Table objects, for Alembic users: they live in the shared core
(outbox_core.tables) with the rest of the schema; this name keeps working."""

from outbox_core.tables import metadata

__all__ = ["metadata"]
