"""What a Postgres connection of ours sets up when it opens, and how that travels when a
connection pooler sits in front of the server.

Server settings (statement_timeout, synchronous_commit, planner costs) normally go in the
libpq `options` startup parameter, once per connection. A pooler in transaction mode
(PgBouncer's pool_mode=transaction) refuses that parameter (or passes only the few
settings it tracks) and hands each transaction whatever server connection is free, so a
setting made for a session could not outlive its transaction anyway: there, every
transaction begins by setting them with set_config(..., true) (SET LOCAL), server-side
prepared statements are off (a statement prepared on one server connection is not on the
next), and LISTEN cannot work (its caller decides what to do without it).

TCP keepalives and tcp_user_timeout are libpq connection parameters, for the socket to
whatever the URL names (the pooler, if one is there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from outbox_core.database_url import Dialect, libpq_options
from outbox_core.executors import Rows, Statement

Pooler = Literal["none", "transaction"]
POOLERS: tuple[Pooler, ...] = get_args(Pooler)


@dataclass(frozen=True)
class SessionSettings:
    """server: Postgres settings (name -> value) for every statement; libpq: connection
    parameters (keepalives_idle=30, ...), a value the URL gives itself winning over ours;
    pooler: what sits between us and Postgres."""

    server: Mapping[str, str] = field(default_factory=dict)
    libpq: Mapping[str, str] = field(default_factory=dict)
    pooler: Pooler = "none"

    @property
    def per_transaction(self) -> bool:
        """The server settings are set at the start of each transaction."""
        return self.pooler == "transaction" and bool(self.server)

    def options(self) -> str | None:
        """The server settings as libpq `options` (`-c name=value ...`); None when they
        travel per transaction, or there are none."""
        if self.pooler != "none" or not self.server:
            return None
        return " ".join(f"-c {name}={value}" for name, value in self.server.items())

    def local_settings(self) -> Statement:
        """The statement that opens each transaction behind a transaction pooler."""
        return Statement(
            "session_settings_local",
            {"names": list(self.server), "values": list(self.server.values())},
        )

    def show(self) -> Statement:
        """The statement that reads the server settings back (SessionSettings.dropped)."""
        return Statement("session_settings_show", {"names": list(self.server)})

    def dropped(self, shown: Sequence[Sequence[Any]]) -> bool:
        """Whether none of the server settings is in force (rows of `show`): something
        between us and Postgres dropped them (a pooler told to ignore `options`). Some
        differing is no sign: a user's own `options` win over ours on purpose."""
        if not self.server:
            return False
        now = {str(name): str(value) for name, value in shown}
        return not any(now.get(name) == value for name, value in self.server.items())

    def connect_kwargs(self, conninfo: str) -> dict[str, Any]:
        """Keyword arguments for psycopg's connect() beside conninfo: our options merged
        with the user's (libpq_options), the libpq parameters the URL does not set, and no
        server-side prepared statements behind a transaction pooler."""
        kwargs: dict[str, Any] = {}
        options = libpq_options(conninfo, self.options())
        if options:
            kwargs["options"] = options
        given = _url_params(conninfo)
        kwargs.update({k: v for k, v in self.libpq.items() if k not in given})
        if self.pooler == "transaction":
            kwargs["prepare_threshold"] = None
        return kwargs


def _url_params(conninfo: str) -> set[str]:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        return set(conninfo_to_dict(conninfo))
    except ProgrammingError:
        return set()  # a malformed URL: connecting reports it


class ConnectionExecutor(Protocol):
    """An executor on one connection whose `transaction()` is an async context manager
    (psycopg's AsyncConnection and asyncpg's Connection alike)."""

    conn: Any

    async def run(self, statement: Statement) -> Rows: ...


class PerTransaction:
    """Each statement in a transaction of its own that begins with the session settings
    (behind a transaction pooler): the same commits as autocommit, one statement each."""

    dialect: Dialect = "postgres"

    def __init__(self, executor: ConnectionExecutor, local: Statement) -> None:
        self._executor = executor
        self._local = local

    async def run(self, statement: Statement) -> Rows:
        async with self._executor.conn.transaction():
            await self._executor.run(self._local)
            return await self._executor.run(statement)
