"""A batch's payloads go to psycopg 3 as a binary bytea[] (`%(name)b`): as hex text the
server spends about 50 ms parsing each megabyte. Only lists of bytes change."""

from __future__ import annotations

import uuid

from outbox_core.executors import binary_byte_arrays

SQL = "SELECT %(payloads)s::bytea[], %(payloads_more)s::text[], %(keys)s::text[], %(one)s, %%s"


def test_a_list_of_bytes_is_bound_in_binary() -> None:
    params = {"payloads": [b"a", None, b""], "payloads_more": ["x"], "keys": ["k"], "one": b"z"}
    assert binary_byte_arrays(SQL, params) == (
        "SELECT %(payloads)b::bytea[], %(payloads_more)s::text[], %(keys)s::text[], %(one)s, %%s"
    )


def test_everything_else_stays_as_it_was() -> None:
    for value in ([], [None, b"a"], ["a", b"b"], b"ab", "ab", [uuid.uuid4()], (b"a",), 7):
        params = {"payloads": value, "payloads_more": [b"x"][:0], "keys": [], "one": None}
        assert binary_byte_arrays(SQL, params) == SQL
