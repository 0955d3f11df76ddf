"""Every hostile input emit refuses, refused before any SQL, on a connection of each dialect.

No database is needed to prove "before any SQL": the SQLite connection is an in-memory one
whose every statement is traced, and the Postgres one is a SQLAlchemy Session on an engine
pointed at a port nothing listens on, so a statement (even a connection attempt) would end
in a different error than the one expected. tests/integration/test_emit.py runs one of
these inputs on each real database, where the caller's transaction then commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from producer_lib import Event, InvalidEvent, Outbox
from scripts.ports import refusing_address
from tests.support.events import BAD_INPUTS, emit_kwargs


@pytest.fixture(params=["sqlite", "postgres"])
def connection(request: pytest.FixtureRequest) -> Iterator[tuple[Any, list[str]]]:
    """A connection in a transaction of each dialect, and the statements it ran."""
    ran: list[str] = []
    if request.param == "sqlite":
        conn = sqlite3.connect(":memory:")
        conn.execute("BEGIN")
        conn.set_trace_callback(ran.append)
        try:
            yield conn, ran
        finally:
            conn.close()
        return
    with refusing_address() as address:
        engine = create_engine(f"postgresql+psycopg://nobody@{address}/outbox")
        try:
            with Session(engine) as session:
                yield session, ran
        finally:
            engine.dispose()


@pytest.mark.parametrize(("case", "override", "error"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_before_any_sql(
    connection: tuple[Any, list[str]],
    case: str,
    override: dict[str, Any],
    error: type[InvalidEvent],
) -> None:
    conn, ran = connection
    outbox = Outbox(max_event_bytes=4096)
    with pytest.raises(error) as info:
        outbox.emit(conn, **emit_kwargs(**override))
    with pytest.raises(error):
        outbox.emit_batch(conn, [Event("orders", "ok", "E", {}), Event(**emit_kwargs(**override))])
    assert type(info.value) is error
    assert str(info.value)
    assert ran == []
