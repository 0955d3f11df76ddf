from __future__ import annotations

import re

import pytest

from outbox_core.queries import (
    DIALECTS,
    Dialect,
    numbered,
    parse_blocks,
    queries,
    query,
    to_numbered,
)

# Queries every dialect must provide; Postgres-only extras (batch insert, advisory locks)
# are listed apart so a missing SQLite twin is a decision, not an accident.
SHARED = {
    "outbox_insert",
    "outbox_count_unpublished",
    "idempotency_insert",
    "idempotency_get",
    "setting_get",
    "setting_put",
    "migration_table_create",
    "migration_list",
    "migration_record",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_has_the_shared_queries(dialect: Dialect) -> None:
    assert set(queries(dialect)) >= SHARED


@pytest.mark.parametrize("dialect", DIALECTS)
def test_names_are_noun_verb(dialect: Dialect) -> None:
    for name in queries(dialect):
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", name), name


def test_parse_blocks_keeps_comments_and_strips_semicolon() -> None:
    blocks = parse_blocks(
        "-- file header\n\n-- name: a_get\n-- why\nSELECT 1;\n\n-- name: b_put\nSELECT 2;\n"
    )
    assert blocks == {"a_get": "-- why\nSELECT 1", "b_put": "SELECT 2"}


def test_parse_blocks_refuses_duplicates_and_empty() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_blocks("-- name: a_get\nSELECT 1;\n-- name: a_get\nSELECT 2;\n")
    with pytest.raises(ValueError, match="empty"):
        parse_blocks("-- name: a_get\n\n")


def test_unknown_query_names_the_dialect() -> None:
    with pytest.raises(KeyError, match="sqlite"):
        query("sqlite", "outbox_insert_batch")


def test_numbered_placeholders_follow_first_use_and_repeat_their_number() -> None:
    converted = to_numbered(
        "SELECT %(b)s::int, %(a)s, %(b)s::text, '100%%' WHERE x = %(c)s -- %(a)s again"
    )
    assert converted.sql == "SELECT $1::int, $2, $1::text, '100%' WHERE x = $3 -- $2 again"
    assert converted.names == ("b", "a", "c")


def test_numbered_refuses_a_lone_percent() -> None:
    with pytest.raises(ValueError, match="lone %"):
        to_numbered("SELECT 5 % 2, %(a)s")


def test_every_postgres_block_converts_to_numbered_placeholders() -> None:
    for name, sql in queries("postgres").items():
        converted = numbered("postgres", name)
        assert "%(" not in converted.sql, name
        assert (
            len(converted.names)
            == len(set(converted.names))
            == len(set(re.findall(r"%\((\w+)\)s", sql)))
        )
