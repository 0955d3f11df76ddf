"""outbox_core.tables (for Alembic users) describes the same schema as schema.sql."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from outbox_core.tables import metadata
from tests.integration.test_migrations import catalog
from tests.support.db import Backend, postgres_backend
from tests.support.postgres import Databases

pytestmark = pytest.mark.integration


def test_sqlalchemy_tables_match_schema_sql(pg_url: str, databases: Databases) -> None:
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        metadata.create_all(conn)
    engine.dispose()
    from_tables: Backend = postgres_backend(pg_url)
    migrated = postgres_backend(databases.empty())
    migrated.migrate()
    expected = catalog(migrated)
    got = catalog(from_tables)
    # The shard_count row is data: Alembic users insert it in their revision.
    expected.pop("schema_settings")
    got.pop("schema_settings")
    assert got == expected
