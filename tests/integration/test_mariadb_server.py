"""The MariaDB the tests run on (scripts/service_mariadb.py): each test's database is its
own, the server does what the MariaDB dialect relies on (SKIP LOCKED, INSERT/DELETE ...
RETURNING, READ COMMITTED sessions), and it listens on loopback only."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from outbox_core.queries import parse_blocks
from scripts.service_mariadb import mariadb_login
from tests.support.mariadb import MariaDatabases, connect

SQL = parse_blocks(
    (Path(__file__).parents[1] / "support" / "sql" / "mariadb_server.sql").read_text(),
    "mariadb_server.sql",
)
# MySQL's error numbers (what PyMySQL's errors carry as args[0]).
ER_PARSE_ERROR = 1064


class Session:
    """One connection, its statements by block name."""

    def __init__(self, url: str) -> None:
        self.conn = connect(url)

    def rows(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(SQL[name], params)
            return list(cur.fetchall())

    def value(self, name: str, params: dict[str, Any] | None = None) -> Any:
        return self.rows(name, params)[0][0]


@pytest.fixture
def sessions(mariadb_url: str) -> Iterator[list[Session]]:
    """Three connections to this test's database, the table `jobs` made and empty."""
    opened = [Session(mariadb_url) for _ in range(3)]
    opened[0].rows("jobs_create")
    try:
        yield opened
    finally:
        for session in opened:
            session.conn.close()


def _names(session: Session) -> list[str]:
    return [name for (name,) in session.rows("jobs_names")]


def test_a_test_gets_a_database_of_its_own(
    mariadb_url: str, mariadb_databases: MariaDatabases
) -> None:
    mine = mariadb_login(mariadb_url).database
    assert mine.startswith(mariadb_databases.session)
    other_url = mariadb_databases.empty()
    other = mariadb_login(other_url).database
    assert other != mine
    first, second = Session(mariadb_url), Session(other_url)
    try:
        assert first.value("current_database") == mine
        assert first.value("database_exists", {"name": mine}) == 1
        assert first.rows("tables") == []
        first.rows("jobs_create")
        assert first.rows("tables") == [("jobs",)]
        assert second.value("current_database") == other
        assert second.rows("tables") == []
    finally:
        first.conn.close()
        second.conn.close()


def test_insert_and_delete_return_the_rows(sessions: list[Session]) -> None:
    session = sessions[0]
    first = session.rows("jobs_insert", {"name": "first"})
    second = session.rows("jobs_insert", {"name": "second"})
    assert [name for _, name in first + second] == ["first", "second"]
    assert first[0][0] < second[0][0]
    assert session.rows("jobs_delete", {"id": first[0][0]}) == first
    assert _names(session) == ["second"]


def test_update_returning_is_a_syntax_error(sessions: list[Session]) -> None:
    import pymysql  # type: ignore[import-untyped, import-not-found, unused-ignore]

    session = sessions[0]
    (row_id, _), *_ = session.rows("jobs_insert", {"name": "first"})
    with pytest.raises(pymysql.err.ProgrammingError) as raised:
        session.rows("jobs_rename", {"id": row_id, "name": "renamed"})
    assert raised.value.args[0] == ER_PARSE_ERROR


def test_skip_locked_passes_over_a_locked_row(sessions: list[Session]) -> None:
    writer, holder, claimer = sessions
    for name in ("a", "b", "c"):
        writer.rows("jobs_insert", {"name": name})
    writer.conn.commit()
    for session in (holder, claimer):
        session.rows("read_committed")
    # Without SKIP LOCKED the claimer would wait for the holder's lock, and fail with a
    # lock wait timeout after a second instead of hanging the test.
    claimer.rows("lock_wait_short")
    holder.conn.begin()
    [(locked,)] = holder.rows("jobs_lock_first")
    claimer.conn.begin()
    claimed = [row_id for (row_id,) in claimer.rows("jobs_lock_unlocked")]
    assert locked not in claimed
    assert len(claimed) == 2
    holder.conn.rollback()
    claimer.conn.rollback()


def test_a_read_committed_session_sees_commits_made_during_its_transaction(
    sessions: list[Session],
) -> None:
    writer, committed, repeatable = sessions
    writer.rows("jobs_insert", {"name": "before"})
    writer.conn.commit()
    committed.rows("read_committed")
    assert committed.value("isolation") == "READ-COMMITTED"
    # The server's default stays REPEATABLE READ: only the session that asks changes.
    assert repeatable.value("isolation") == "REPEATABLE-READ"
    for session in (committed, repeatable):
        session.conn.begin()
        assert _names(session) == ["before"]
    writer.rows("jobs_insert", {"name": "during"})
    writer.conn.commit()
    assert _names(committed) == ["before", "during"]
    assert _names(repeatable) == ["before"]
    committed.conn.rollback()
    repeatable.conn.rollback()


def _listening(port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The local addresses of this machine's TCP sockets listening on `port`, from
    /proc/net/tcp and tcp6 (hex addresses, 32-bit words in host order)."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text().splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, 32, 8))
            found.append(ipaddress.ip_address(raw[: len(address) // 2]))
    return found


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


def test_the_server_listens_on_loopback_only(mariadb_url: str) -> None:
    host = urlsplit(mariadb_url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"MARIADB_URL names a server on another host ({host})")
    session = Session(mariadb_url)
    try:
        assert session.value("bind_address") == "127.0.0.1"
    finally:
        session.conn.close()
    listening = _listening(mariadb_login(mariadb_url).port)
    assert listening, "no listening socket found for the server's port"
    assert all(_loopback(address) for address in listening), listening
