"""Which migration an existing Postgres schema is at, when no migration recorded it.

Tables made by Alembic from outbox_core.tables (or by copying a migration's Alembic
operations, outbox_core.alembic_ops) are adopted only when they are exactly what this
version's migrations create: the migrations are applied in a scratch schema inside a
transaction that is always rolled back, and after each one the scratch tables' columns,
indexes and constraints are compared with the real ones. Nothing is trusted from names
alone: a missing index or a different default is a refusal, never a stamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from outbox_core.errors import DatabaseError, MigrationError
from outbox_core.executors import PsycopgExecutor, Rows, Statement

REFERENCE = "outbox_migration_reference"
_PARTS = ("columns", "indexes", "constraints")
_ONE = {"columns": "column", "indexes": "index", "constraints": "constraint"}
_SHOWN = 6  # differences named in a refusal
_DENIED = "42501"  # insufficient_privilege


@dataclass(frozen=True)
class Shape:
    """Tables, columns, indexes and constraints of a set of tables, comparable as values."""

    tables: frozenset[str]
    columns: frozenset[tuple[Any, ...]]
    indexes: frozenset[tuple[Any, ...]]
    constraints: frozenset[tuple[Any, ...]]

    def differences(self, other: Shape) -> list[str]:
        """What `other` (the database) has that this (the migrations' schema) has not, and
        the reverse, one line each."""
        lines = [f"missing table {t}" for t in sorted(self.tables - other.tables)]
        lines += [f"unexpected table {t}" for t in sorted(other.tables - self.tables)]
        for part in _PARTS:
            mine, theirs = getattr(self, part), getattr(other, part)
            one = _ONE[part]
            lines += [f"expected {one} {_show(r)}" for r in sorted(mine - theirs, key=str)]
            lines += [f"found {one} {_show(r)}" for r in sorted(theirs - mine, key=str)]
        return lines


def _show(row: tuple[Any, ...]) -> str:
    return " ".join(str(v) for v in row if v not in ("", None))


def _rows(db: PsycopgExecutor, name: str, schema: str, tables: Sequence[str] | None) -> Rows:
    return db.run(Statement(name, {"schema": schema, "tables": list(tables) if tables else None}))


def describe(db: PsycopgExecutor, schema: str, tables: Sequence[str] | None) -> Shape:
    """The shape of `tables` in `schema` (None: every table there)."""
    found = [r[0] for r in _rows(db, "migration_describe_tables", schema, tables)]
    if tables is not None and not found:
        return Shape(frozenset(), frozenset(), frozenset(), frozenset())
    names = found if tables is None else tables
    return Shape(
        frozenset(found),
        *(
            frozenset(tuple(r) for r in _rows(db, f"migration_describe_{part}", schema, names))
            for part in _PARTS
        ),
    )


def reference_shapes(conn: Any, migrations: Sequence[Any]) -> list[Shape]:
    """The schema's shape after 0, 1, ... n of `migrations`, built in a scratch schema."""
    db = PsycopgExecutor(conn)
    shapes = []
    with conn.transaction(force_rollback=True):
        try:
            db.run(Statement("migration_reference_create"))
        except DatabaseError as exc:
            if exc.sqlstate != _DENIED:
                raise
            raise MigrationError(
                "the database holds outbox tables no migration recorded; comparing them with "
                "the migrations needs CREATE on the database (for a scratch schema that is "
                "rolled back): grant it to this role, or migrate as the database's owner"
            ) from exc
        db.run(Statement("migration_reference_use"))
        shapes.append(describe(db, REFERENCE, None))
        for mig in migrations:
            conn.execute(mig.sql.encode())  # one simple-protocol script, as migrate runs it
            shapes.append(describe(db, REFERENCE, None))
    return shapes


def schema_version(conn: Any, migrations: Sequence[Any]) -> int:
    """How many of `migrations` the existing outbox tables already hold, exactly; raises
    MigrationError naming the differences when they match none."""
    db = PsycopgExecutor(conn)
    schema = str(db.run(Statement("migration_schema_of_outbox"))[0][0])
    shapes = reference_shapes(conn, migrations)
    names = sorted(shapes[-1].tables)
    actual = describe(db, schema, names)
    for version in range(len(shapes) - 1, -1, -1):
        if shapes[version] == actual:
            return version
    nearest = min(range(len(shapes)), key=lambda v: len(shapes[v].differences(actual)))
    diff = shapes[nearest].differences(actual)
    more = f"; and {len(diff) - _SHOWN} more" if len(diff) > _SHOWN else ""
    raise MigrationError(
        f"the outbox tables in schema {schema!r} are not the ones this version's migrations "
        f"create (nearest: migration {nearest:04d}; "
        + "; ".join(diff[:_SHOWN])
        + more
        + "): fix them (outbox_core.tables, outbox_core.alembic_ops) before migrating"
    )
