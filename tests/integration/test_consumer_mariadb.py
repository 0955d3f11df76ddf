"""consumer_lib on MariaDB, where its dedup differs from the other databases: two
transactions recording one event at once (the insert cannot say ON CONFLICT DO NOTHING),
at both isolation levels an application may run at, and input the key cannot hold whole.

The scenarios every database shares (exactly once under redelivery, rollback, batches,
purge, dead letters) run on MariaDB through the `case` and `shared` fixtures.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine

from consumer_lib import SqlAlchemySync
from outbox_core.errors import OutboxError
from tests.support import mariadb
from tests.support.consumers import new_group, prepare, processed_ids
from tests.support.db import Backend, mariadb_backend
from tests.support.waits import until

pytestmark = pytest.mark.integration

LEVELS = ["READ COMMITTED", "REPEATABLE READ"]
# SQLAlchemy's sync MariaDB drivers under SqlAlchemySync.
DRIVERS = ["pymysql", "mysqldb"]


@pytest.fixture
def maria(mariadb_url: str) -> Backend:
    return prepare(mariadb_backend(mariadb_url))


def database(backend: Backend, level: str, driver: str = "pymysql") -> SqlAlchemySync:
    url = mariadb.sqlalchemy_url(backend.target, driver)
    return SqlAlchemySync(create_engine(url, isolation_level=level))


class Holder:
    """A handler that stays in its transaction (the processed row inserted, not committed)
    until released, then returns or raises."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.fail = False

    def __call__(self, event: object, session: object) -> None:
        self.inside.set()
        assert self.release.wait(60), "never released"
        if self.fail:
            raise RuntimeError("the first transaction's handler failed")


@pytest.fixture
def holder() -> Iterator[Holder]:
    held = Holder()
    yield held
    held.release.set()  # a failed test leaves no thread waiting


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("first_commits", [True, False], ids=["commits", "rolls-back"])
async def test_a_second_transaction_waits_for_the_first_and_applies_the_event_only_if_it_failed(
    maria: Backend, level: str, first_commits: bool, holder: Holder, driver: str
) -> None:
    """The same event in two partitions' transactions at once: the second waits on the
    first one's processed row. First commits: the second sees a duplicate and skips its
    handler (at READ COMMITTED after its insert met the row: the statement runs again).
    First rolls back: the second applies the event."""
    group, event_id = new_group(), str(uuid.uuid4())
    first, second = database(maria, level, driver), database(maria, level, driver)
    ran: list[object] = []
    try:
        a = asyncio.create_task(first.apply(group, event_id, holder, None))
        await until(holder.inside.is_set, 30, "the first handler inside its transaction")
        b = asyncio.create_task(second.apply(group, event_id, lambda e, s: ran.append(e), "second"))

        def second_alive() -> None:
            if b.done():  # it ended without waiting: say why
                raise AssertionError(f"the second ended before it waited: {b.result()!r}")

        await until(
            maria.lock_waiters,
            60,
            "the second waiting",
            blocking=True,
            alive=second_alive,
            state=lambda: (
                maria.mariadb_waiting_transactions(),
                maria.fetch("sessions_of_this_database"),
            ),
        )
        holder.fail = not first_commits
        holder.release.set()
        if first_commits:
            assert await a is True
            assert await b is False
            assert ran == []
        else:
            with pytest.raises(RuntimeError):
                await a
            assert await b is True
            assert ran == ["second"]
        assert processed_ids(maria, group) == {event_id}
    finally:
        await first.close()
        await second.close()


KNOWN = "7f1c1a52-0c0e-4c4b-9d55-2b7b3cf4a1e0"


@pytest.mark.parametrize(
    ("event_id", "group"),
    [
        # Longer than a UUID, starting with one recorded: neither stored cut short nor
        # taken for that one.
        (KNOWN + "x", None),
        (KNOWN[:-1] + "\N{LATIN SMALL LETTER E WITH ACUTE}", None),  # not ASCII
        (str(uuid.uuid4()), "g" * 256),  # past the settings' 255 characters
    ],
    ids=["long-id", "non-ascii-id", "long-group"],
)
@pytest.mark.parametrize("driver", DRIVERS)
async def test_an_id_or_group_the_key_cannot_hold_whole_fails_and_records_nothing(
    maria: Backend, event_id: str, group: str | None, driver: str
) -> None:
    group = group or new_group()
    db = database(maria, "READ COMMITTED", driver)
    ran: list[Any] = []
    try:
        if len(group) <= 255:
            assert await db.apply(group, KNOWN, lambda e, s: None, None)
        with pytest.raises(OutboxError):
            await db.apply(group, event_id, lambda e, s: ran.append(e), "event")
    finally:
        await db.close()
    assert ran == []
    assert processed_ids(maria, group) <= {KNOWN}


async def test_the_longest_group_the_settings_take_is_recorded_and_purged_whole(
    maria: Backend,
) -> None:
    """255 characters of four bytes each: the settings' limit fits the key."""
    group = "\N{GRINNING FACE}" * 255
    db = database(maria, "REPEATABLE READ")
    try:
        event_id = str(uuid.uuid4())
        assert await db.apply(group, event_id, lambda e, s: None, None)
        assert not await db.apply(group, event_id, lambda e, s: None, None)
        assert processed_ids(maria, group) == {event_id}
        maria.rewind(10)
        assert await db.purge(group, 5.0, 10) == 1
    finally:
        await db.close()
