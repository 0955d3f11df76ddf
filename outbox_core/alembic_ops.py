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


# Migration version -> its operations (every migration after 0001 has one: a test checks).
UPGRADES: dict[int, Callable[[Any], None]] = {2: upgrade_0002}
