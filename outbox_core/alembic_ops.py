"""Each migration after the first as Alembic operations, to copy into your own history.

With the outbox tables in your Alembic history (outbox_core.tables), a version that
ships migration NNNN ships `upgrade_NNNN` here too: add a revision that calls it,

    from alembic import op
    from outbox_core.alembic_ops import upgrade_0002

    def upgrade() -> None:
        upgrade_0002(op)

then `alembic upgrade head` and `outbox-relay migrate`, which finds the migration already
in the schema and records it (it compares first, outbox_core.schema_match). The first
migration has no function: autogenerate makes it from outbox_core.tables. The operations
are the same objects the SQL migration creates, names included (a test applies each here
and compares the result with the SQL migration's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


def upgrade_0002(op: Any) -> None:
    """0002_tenant: an optional tenant per event, and the index fair claims walk."""
    op.add_column("outbox_events", sa.Column("tenant", sa.Text(), nullable=True))
    op.create_check_constraint("outbox_events_tenant_check", "outbox_events", "tenant <> ''")
    op.create_index(
        "outbox_events_tenant_idx",
        "outbox_events",
        ["shard", sa.text("coalesce(tenant, '')"), "id"],
        postgresql_where=sa.text("published_at IS NULL"),
    )


def downgrade_0002(op: Any) -> None:
    op.drop_index("outbox_events_tenant_idx", table_name="outbox_events")
    op.drop_constraint("outbox_events_tenant_check", "outbox_events", type_="check")
    op.drop_column("outbox_events", "tenant")


def upgrade_0003(op: Any) -> None:
    """0003_consumer_dead_letters: processed_events purged per group (its index), and the
    table of records a consumer's dead-letter topic can never take."""
    op.create_index(
        "processed_events_group_age_idx", "processed_events", ["consumer_group", "processed_at"]
    )
    op.drop_index("processed_events_processed_at_idx", table_name="processed_events")
    op.create_table(
        "consumer_dead_letters",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("consumer_group", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=False),
        sa.Column("source_offset", sa.Text(), nullable=False),
        sa.Column("record_key", sa.LargeBinary(), nullable=True),
        sa.Column("record_value", sa.LargeBinary(), nullable=True),
        sa.Column(
            "headers",
            postgresql.JSONB(),
            nullable=False,
            server_default=sa.text("'[]'::jsonb"),
        ),
        sa.Column("error_type", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("dead_letter_error", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("id", name="consumer_dead_letters_pkey"),
        sa.UniqueConstraint(
            "consumer_group",
            "topic",
            "source_partition",
            "source_offset",
            name="consumer_dead_letters_record_key",
        ),
    )


def downgrade_0003(op: Any) -> None:
    op.drop_table("consumer_dead_letters")
    op.create_index("processed_events_processed_at_idx", "processed_events", ["processed_at"])
    op.drop_index("processed_events_group_age_idx", table_name="processed_events")


def upgrade_0004(op: Any) -> None:
    """0004_headers_check: a row's headers are a JSON object. NOT VALID: new writes are
    checked, existing rows are not read (validate later, docs/compatibility.md)."""
    op.create_check_constraint(
        "outbox_events_headers_check",
        "outbox_events",
        "jsonb_typeof(headers) = 'object'",
        postgresql_not_valid=True,
    )


def downgrade_0004(op: Any) -> None:
    op.drop_constraint("outbox_events_headers_check", "outbox_events", type_="check")


def upgrade_0005(op: Any) -> None:
    """0005_published_history: retention=keep's published rows move to outbox_published,
    partitioned by publish time. Its DEFAULT partition and the function that rotates the
    partitions are made by `outbox-relay migrate` (Alembic has no operation for either).
    Rows already marked published stay in outbox_events, where the purge removes them
    after the retention as before (the SQL migration moves them instead)."""
    op.create_table(
        "outbox_published",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("event_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("headers", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", "published_at", name="outbox_published_pkey"),
        postgresql_partition_by="RANGE (published_at)",
    )
    op.create_index("outbox_published_published_idx", "outbox_published", ["published_at"])


def downgrade_0005(op: Any) -> None:
    op.drop_table("outbox_published")


# Migration version -> its operations (every migration after 0001 has one: a test checks).
UPGRADES: dict[int, Callable[[Any], None]] = {
    2: upgrade_0002,
    3: upgrade_0003,
    4: upgrade_0004,
    5: upgrade_0005,
}
