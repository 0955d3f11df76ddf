"""A claim's rows become ClaimedRow by column name, whatever the order of the columns."""

from __future__ import annotations

import pytest

from outbox_core.errors import DatabaseError
from relay.sql_store import claimed_row_maker
from relay.store import ClaimedRow

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
