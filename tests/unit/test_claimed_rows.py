"""A claim's rows become ClaimedRow by column name, whatever the order of the columns; a
named statement brings its column names on every executor."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy

from outbox_core.errors import DatabaseError
from outbox_core.executors import NamedRows, SqlAlchemyExecutor, SqliteExecutor, Statement
from outbox_core.migrate import migrate
from relay.store import ClaimedRow
from relay.store.sql import claimed_row_maker

ROW = ClaimedRow(7, 3, "e-7", "orders", "k", "Created", b"\x00", "{}", 2, 1.5, "acme")


def test_columns_in_claimed_row_s_order_make_rows_directly() -> None:
    make = claimed_row_maker(ClaimedRow._fields)
    made = make(tuple(ROW))
    assert made == ROW
    assert type(made) is ClaimedRow
    assert made.headers_json == "{}"


def test_columns_in_another_order_are_read_by_name() -> None:
    columns = (*reversed(ClaimedRow._fields), "extra")
    values = (*reversed(ROW), "ignored")
    made = claimed_row_maker(columns)(values)
    assert made == ROW
    assert (made.id, made.tenant, made.payload) == (7, "acme", b"\x00")


def test_a_missing_column_is_a_clear_error_not_a_shifted_row() -> None:
    columns = (*(f for f in ClaimedRow._fields if f != "headers_json"), "headers")
    with pytest.raises(DatabaseError, match="no column headers_json") as raised:
        claimed_row_maker(columns)
    assert not raised.value.retriable


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "outbox.db"
    migrate(f"sqlite:///{path}")
    return path


def test_a_named_statement_brings_its_column_names_on_each_executor(sqlite_db: Path) -> None:
    named = Statement("lease_list", named=True)
    with contextlib.closing(sqlite3.connect(sqlite_db)) as conn:
        rows = SqliteExecutor(conn).run(named)
        assert isinstance(rows, NamedRows)
        assert len(rows.columns) == 4
        assert rows.columns[0] == "shard"
        assert not isinstance(SqliteExecutor(conn).run(Statement("lease_list")), NamedRows)
    engine = sqlalchemy.create_engine(f"sqlite:///{sqlite_db}")
    try:
        with engine.connect() as conn:
            through_sqlalchemy = SqlAlchemyExecutor(conn).run(named)
    finally:
        engine.dispose()
    assert isinstance(through_sqlalchemy, NamedRows)
    assert through_sqlalchemy.columns == rows.columns
