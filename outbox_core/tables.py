"""SQLAlchemy Table objects of the Postgres schema, for Alembic users.

Add `outbox_core.tables.metadata` (also importable as `producer_lib.tables.metadata`) to
your Alembic target metadata and autogenerate: you get the same tables, constraints and
partial indexes as migrations/postgres/schema.sql (tests/integration/test_tables.py checks
it). Then run `outbox-relay migrate`: it verifies the tables equal the migrations' and
records them, and inserts the shard_count setting (tests/integration/test_alembic.py runs
the README's steps). Later migrations come as Alembic operations in outbox_core.alembic_ops.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP, UUID

metadata = MetaData()
_tz = TIMESTAMP(timezone=True)

outbox_settings = Table(
    "outbox_settings",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

outbox_events = Table(
    "outbox_events",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("event_id", UUID(as_uuid=True), nullable=False),
    Column("topic", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("shard", SmallInteger, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("headers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", _tz, nullable=False, server_default=text("now()")),
    Column("available_at", _tz, nullable=False, server_default=text("now()")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("published_at", _tz),
    Column("tenant", Text),  # NULL: no tenant
    UniqueConstraint("event_id", name="outbox_events_event_id_key"),
    CheckConstraint("status IN ('pending', 'parked')", name="outbox_events_status_check"),
    CheckConstraint("topic <> ''", name="outbox_events_topic_check"),
    CheckConstraint("key <> ''", name="outbox_events_key_check"),
    CheckConstraint("shard >= 0", name="outbox_events_shard_check"),
    CheckConstraint("tenant <> ''", name="outbox_events_tenant_check"),
    CheckConstraint("jsonb_typeof(headers) = 'object'", name="outbox_events_headers_check"),
)
Index(
    "outbox_events_unpublished_idx",
    outbox_events.c.shard,
    outbox_events.c.id,
    postgresql_where=outbox_events.c.published_at.is_(None),
)
Index(
    "outbox_events_published_idx",
    outbox_events.c.published_at,
    postgresql_where=outbox_events.c.published_at.is_not(None),
)

Index(
    "outbox_events_blocking_idx",
    outbox_events.c.shard,
    outbox_events.c.key,
    outbox_events.c.id,
    postgresql_where=text("published_at IS NULL AND (status = 'parked' OR attempts > 0)"),
)
Index(
    "outbox_events_tenant_idx",
    outbox_events.c.shard,
    text("coalesce(tenant, '')"),
    outbox_events.c.id,
    postgresql_where=outbox_events.c.published_at.is_(None),
)

# retention=keep's published rows, partitioned by publish time. Its partitions (the DEFAULT
# one included) are data: `outbox-relay migrate` and the relay make them.
outbox_published = Table(
    "outbox_published",
    metadata,
    Column("id", BigInteger, nullable=False),
    Column("event_id", UUID(as_uuid=True), nullable=False),
    Column("topic", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("shard", SmallInteger, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("headers", JSONB, nullable=False),
    Column("created_at", _tz, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text),
    Column("published_at", _tz, nullable=False),
    Column("tenant", Text),
    PrimaryKeyConstraint("id", "published_at", name="outbox_published_pkey"),
    postgresql_partition_by="RANGE (published_at)",
)
Index("outbox_published_published_idx", outbox_published.c.published_at)

outbox_idempotency = Table(
    "outbox_idempotency",
    metadata,
    Column("scope", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("body_hash", LargeBinary, nullable=False),
    Column("event_id", UUID(as_uuid=True), nullable=False),
    Column("created_at", _tz, nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("scope", "idempotency_key", name="outbox_idempotency_pkey"),
)
Index("outbox_idempotency_created_idx", outbox_idempotency.c.created_at)

outbox_relay_leases = Table(
    "outbox_relay_leases",
    metadata,
    Column("shard", SmallInteger, primary_key=True, autoincrement=False),
    Column("owner", Text),
    Column("token", BigInteger, nullable=False, server_default=text("0")),
    Column("lease_until", _tz, nullable=False, server_default=text("'-infinity'")),
)

outbox_relay_replicas = Table(
    "outbox_relay_replicas",
    metadata,
    Column("owner", Text, primary_key=True),
    Column("started_at", _tz, nullable=False, server_default=text("now()")),
    Column("seen_until", _tz, nullable=False),
)

processed_events = Table(
    "processed_events",
    metadata,
    Column("consumer_group", Text, nullable=False),
    Column("event_id", UUID(as_uuid=True), nullable=False),
    Column("processed_at", _tz, nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("consumer_group", "event_id", name="processed_events_pkey"),
)
Index(
    "processed_events_group_age_idx",
    processed_events.c.consumer_group,
    processed_events.c.processed_at,
)

consumer_dead_letters = Table(
    "consumer_dead_letters",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("consumer_group", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("source_partition", Integer, nullable=False),
    Column("source_offset", Text, nullable=False),
    Column("record_key", LargeBinary),
    Column("record_value", LargeBinary),
    Column("headers", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("error_type", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("dead_letter_error", Text, nullable=False),
    Column("created_at", _tz, nullable=False, server_default=text("now()")),
    UniqueConstraint(
        "consumer_group",
        "topic",
        "source_partition",
        "source_offset",
        name="consumer_dead_letters_record_key",
    ),
)
