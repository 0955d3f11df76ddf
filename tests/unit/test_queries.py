from __future__ import annotations

import re

import pytest

from outbox_core.queries import (
    DIALECTS,
    Dialect,
    in_parameter_style,
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


# Queries a dialect does not have yet (none: MariaDB's relay statements are not in SHARED).
NOT_YET: dict[Dialect, set[str]] = {}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_has_the_shared_queries(dialect: Dialect) -> None:
    assert set(queries(dialect)) >= SHARED - NOT_YET.get(dialect, set())


@pytest.mark.parametrize("dialect", DIALECTS)
def test_names_are_noun_verb(dialect: Dialect) -> None:
    for name in queries(dialect):
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", name), name


def test_parse_blocks_keeps_comments_and_strips_semicolon() -> None:
    blocks = parse_blocks(
        "-- file header\n\n-- name: a_get\n-- why\nSELECT 1;\n\n-- name: b_put\nSELECT 2;\n"
    )
    assert blocks == {"a_get": "-- why\nSELECT 1", "b_put": "SELECT 2"}


def test_comments_after_a_statement_belong_to_what_follows() -> None:
    """A section heading between two blocks is not part of the first: it would hide the
    first's semicolon from the loader and its shape from a driver."""
    blocks = parse_blocks(
        "-- name: a_put\nINSERT INTO t VALUES (%(x)s);\n\n-- next section ---\n\n"
        "-- fragment: f\nx = 1\n-- trailing words\n\n-- name: b_get\nSELECT 1 WHERE {{f}} AND true;\n"
    )
    assert blocks == {
        "a_put": "INSERT INTO t VALUES (%(x)s)",
        "b_get": "SELECT 1 WHERE x = 1 AND true",
    }


def test_parse_blocks_refuses_duplicates_and_empty() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_blocks("-- name: a_get\nSELECT 1;\n-- name: a_get\nSELECT 2;\n")
    with pytest.raises(ValueError, match="empty"):
        parse_blocks("-- name: a_get\n\n")


def test_unknown_query_names_the_dialect() -> None:
    with pytest.raises(KeyError, match="sqlite"):
        query("sqlite", "outbox_insert_batch")


# ------------------------------------------------------------------ fragments

FRAGMENTS = """\
-- name: a_get
-- why
SELECT {{columns}} FROM t WHERE {{rows(rule=not_parked, tenant=nothing)}};

-- fragment: columns
-- documents the fragment; stays in the .sql file
a, b

-- fragment: not_parked
AND status <> 'parked'

-- fragment: rows(rule, tenant)
x > 0
  {{tenant}}
  {{rule}}

-- name: b_get
SELECT {{columns}} FROM t WHERE {{rows(rule=nothing, tenant=not_parked)}};
"""


def test_fragments_are_expanded_into_static_statements() -> None:
    blocks = parse_blocks(FRAGMENTS)
    assert blocks == {
        "a_get": "-- why\nSELECT a, b FROM t WHERE x > 0\n  AND status <> 'parked'",
        "b_get": "SELECT a, b FROM t WHERE x > 0\n  AND status <> 'parked'",
    }


def test_a_multi_line_fragment_takes_the_indentation_of_its_line() -> None:
    text = (
        "-- name: a_get\nSELECT 1\nWHERE\n    {{two}};\n"
        "-- fragment: two\nx = 1\nAND (\n  y = 2\n)\n"
    )
    assert (
        parse_blocks(text)["a_get"] == "SELECT 1\nWHERE\n    x = 1\n    AND (\n      y = 2\n    )"
    )


def test_a_slot_can_pass_its_value_on() -> None:
    text = (
        "-- name: a_get\n{{outer(r=rule)}};\n"
        "-- fragment: rule\nAND r\n"
        "-- fragment: outer(r)\nSELECT 1 {{inner(q=r)}}\n"
        "-- fragment: inner(q)\nWHERE true {{q}}\n"
    )
    assert parse_blocks(text) == {"a_get": "SELECT 1 WHERE true AND r"}


HOSTILE = [
    ("-- name: a_get\nSELECT {{nope}};\n", r"a_get.*unknown fragment 'nope'"),
    (
        "-- name: a_get\nSELECT {{a}};\n-- fragment: a\n{{b}}\n-- fragment: b\n{{a}}\n",
        r"refer to themselves: a -> b -> a",
    ),
    ("-- name: a_get\nSELECT {{a}};\n-- fragment: a\nx {{a}}\n", r"themselves: a -> a"),
    ("-- name: a_get\nSELECT 1;\n-- fragment: spare\nx\n", r"no query uses: spare"),
    (
        "-- name: a_get\nSELECT {{a}};\n-- fragment: a\nx\n-- fragment: b\n{{a}}\n",
        r"no query uses: b",
    ),
    ("-- name: a_get\nSELECT {{f}};\n-- fragment: f(s)\n{{s}}\n", r"needs slot\(s\) s"),
    (
        "-- name: a_get\nSELECT {{f(s=nothing, t=nothing)}};\n-- fragment: f(s)\n{{s}}\n",
        r"no slot 't'",
    ),
    (
        "-- name: a_get\nSELECT {{f(s=nothing, s=nothing)}};\n-- fragment: f(s)\n{{s}}\n",
        r"filled twice",
    ),
    ("-- name: a_get\nSELECT {{f(s=)}};\n-- fragment: f(s)\n{{s}}\n", r"malformed"),
    ("-- name: a_get\nSELECT {{f(s)}};\n-- fragment: f(s)\n{{s}}\n", r"malformed"),
    (
        "-- name: a_get\nSELECT {{f(s=nothing)}};\n-- fragment: f(s, t)\n{{s}}\n",
        r"never uses slot\(s\) t",
    ),
    ("-- name: a_get\nSELECT {{f(s=nothing)}};\n-- fragment: f(s, s)\n{{s}}\n", r"slot twice"),
    (
        "-- name: a_get\nSELECT {{f(a=nothing)}};\n-- fragment: f(a)\n{{a}}\n-- fragment: a\nx\n",
        r"slot\(s\) a have the name of a fragment",
    ),
    ("-- name: a_get\nSELECT {{nothing}};\n", r"fills a slot"),
    ("-- name: a_get\nSELECT 1;\n-- fragment: nothing\nx\n", r"reserved"),
    ("-- name: a_get\nSELECT {{a}};\n-- fragment: a\n-- only a comment\n", r"'a' is empty"),
    ("-- name: a_get\nSELECT {{a};\n", r"malformed fragment reference"),
    ("-- name: a_get\nSELECT {{ A }};\n", r"malformed fragment reference"),
    ("-- name: a_get\nSELECT a}};\n", r"malformed fragment reference"),
    ("-- name: a_get\nSELECT {{a_get}};\n", r"unknown fragment 'a_get'"),
    ("-- name: a_get\nSELECT {{a}};\n-- fragment: a\nx\n-- fragment: a\ny\n", r"defined twice"),
    ("-- name: a\nSELECT {{a}};\n-- fragment: a\nx\n", r"defined twice"),
    ("-- name: a_get\nSELECT {{s}};\n-- fragment: f(s)\n{{s}}\n", r"unknown fragment 's'"),
    (
        "-- name: a_get\nSELECT {{f(s=nothing)}};\n-- fragment: f(s)\n{{s(x=y)}}\n",
        r"slot 's' takes no arguments",
    ),
    ("-- name: Bad Name\nSELECT 1;\n", r"malformed query header"),
    ("-- fragment: f(\nx\n", r"malformed fragment header"),
    ("-- name: a_get\nSELECT 1;\n-- fragment: f()\nx\n", r"malformed slot list"),
]


@pytest.mark.parametrize(("text", "error"), HOSTILE)
def test_a_broken_fragment_is_refused_at_load_with_a_clear_error(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_blocks(text, "broken.sql")


def test_the_error_names_the_file() -> None:
    with pytest.raises(ValueError, match=r"^broken\.sql: query 'a_get'"):
        parse_blocks("-- name: a_get\nSELECT {{nope}};\n", "broken.sql")


def test_a_huge_fragment_chain_is_refused_not_looped() -> None:
    # A cycle through many fragments ends in an error, never in endless expansion.
    chain = "".join(f"-- fragment: f{i}\n{{{{f{(i + 1) % 50}}}}}\n" for i in range(50))
    with pytest.raises(ValueError, match="refer to themselves"):
        parse_blocks("-- name: a_get\nSELECT {{f0}};\n" + chain)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_shipped_statement_is_static_sql(dialect: Dialect) -> None:
    for name, statement in queries(dialect).items():
        assert "{{" not in statement, name
        assert "}}" not in statement, name


def test_shared_blocks_are_composed_from_the_dialect_s_fragments() -> None:
    own = "-- fragment: rule\nAND x > 0\n-- name: a_get\nSELECT {{cols}} FROM t;\n"
    shared = "-- fragment: cols\na, b\n-- name: b_get\nSELECT 1 WHERE true {{rule}};\n"
    assert parse_blocks(own, "d/t.sql", shared=shared) == {
        "a_get": "SELECT a, b FROM t",
        "b_get": "SELECT 1 WHERE true AND x > 0",
    }


def test_a_name_in_both_a_dialect_s_file_and_the_shared_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"d/t\.sql: 'a_get' is defined in both files"):
        parse_blocks("-- name: a_get\nSELECT 1;\n", "d/t.sql", shared="-- name: a_get\nSELECT 2;\n")


def test_a_shared_statement_needs_every_dialect_to_write_its_fragments() -> None:
    with pytest.raises(ValueError, match=r"query 'b_get': unknown fragment 'rule'"):
        parse_blocks("", "d/t.sql", shared="-- name: b_get\nSELECT 1 {{rule}};\n")


def test_shared_parameters_take_each_driver_s_style() -> None:
    text = "SELECT :a, x::int, (:b), '12:30 %' || ':c', 5 % 2 -- :d 100%\nWHERE y=:e_2"
    assert in_parameter_style(text, "sqlite") == text
    assert in_parameter_style(text, "postgres") == (
        "SELECT %(a)s, x::int, (%(b)s), '12:30 %%' || ':c', 5 %% 2 -- :d 100%%\nWHERE y=%(e_2)s"
    )


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
