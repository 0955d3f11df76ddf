"""The relay's database: its settings group, and the store built from them (the pools the
cycle and the control loops use on Postgres, or one SQLite connection)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from outbox_core.asyncpg_pool import AsyncpgPool
from outbox_core.database_url import DatabaseUrl, Dialect, supported, unsupported
from outbox_core.errors import ConfigurationError
from outbox_core.executors import AsyncPool
from outbox_core.mariadb_pool import MariadbPool, session_init
from outbox_core.pg_session import Pooler, SessionSettings
from outbox_core.settings import SettingsGroup
from outbox_core.sqlite_thread import SqliteThread
from relay.store.file_lock import RelayFileLock
from relay.store.sql import POOL_ROLES, PoolRole, SqlStore

# Postgres and MariaDB pools, three, so that no loop waits for another's connection:
# - work: the cycle's (one claim or settle at a time, and a spare), per lane;
# - control: leases and membership, which must not queue behind slow claims or every lease
#   expires at once;
# - side: the backlog gauges, claim floors, horizon and purge. Their statements can grow
#   with the table (a count over a large backlog took 2.7-6.9 s under load); on the
#   control pool they once held both connections while a lease renewal and the claim
#   floors waited, and a quiet tenant's events a second with them. Here they wait only
#   for each other, each statement bounded by database_side_statement_timeout_s.
WORK_CONNECTIONS = 2
CONTROL_CONNECTIONS = 2
SIDE_CONNECTIONS = 2
OPEN_WAIT_S = 30.0
WORK_CHECKOUT_S = 30.0
# Control calls fail fast while the server is away, so a heartbeat round reports it
# within seconds instead of queueing past the lease. A side loop's call may wait for the
# other side loops' statements, each at most the side timeout.
CONTROL_CHECKOUT_S = 5.0
SIDE_STATEMENT_TIMEOUT_S = 10.0
# The cycle's settles commit without waiting for the WAL flush (a disk round trip per
# batch, most of a settle's time). A settle lost to a database crash (the last few
# hundred milliseconds of them at most) leaves its rows pending, so they are published
# again: duplicates around a crash, which the relay's guarantee already allows, never a
# loss. Leases, membership and everything else commit synchronously.
# random_page_cost: with statistics taken while a backlog was all unpublished (after an
# outage, a bulk load), the default cost of 4 makes the planner walk the primary key in
# id order and filter each shard's rows out of every row, published ones included: 560 ms
# for a 16-shard claim of 8,000 rows over a 100k table with 30k published, against 30 ms
# through outbox_events_unpublished_idx. At 1.1 (the usual value for data in cache or on
# SSD) the partial index wins whatever the statistics say (tests/integration/
# test_claim_plan.py). The control connections need it too: the backlog gauge's oldest
# pending row per shard took the same walk, 10 s of a core every refresh (15 s) in the
# middle of a 500,000-row drain, against 0.27 s through the index.
# jit=off: the fair claim's row estimates (a recursive CTE, guessed at ten rows a step)
# put it past jit_above_cost: JIT compilation took 65 of the 157 ms of an 8,000-row
# claim. The relay's statements are short and never gain from JIT.
# plan_cache_mode=force_custom_plan: the driver prepares a statement after a few runs, and
# Postgres then keeps one generic plan for it until the table's statistics change. A plan
# made while autovacuum had just truncated the drained table to no pages (an idle relay
# after a burst) walked it with sequential scans, the blocking check once per row: when a
# steady load came back, each claim read the whole table for every row it returned (10 s
# a claim at 9,000 rows, statement timeouts, 35-40 s of latency) until autovacuum next
# analyzed the table, up to a minute later. A custom plan is made for each run against the
# table's current size: about 0.5 ms of planning a claim.
PLANNER_SETTINGS = {"random_page_cost": "1.1", "jit": "off", "plan_cache_mode": "force_custom_plan"}
WORK_SETTINGS = {"synchronous_commit": "off", **PLANNER_SETTINGS}
PLANNER_OPTIONS = SessionSettings(server=PLANNER_SETTINGS).options() or ""
WORK_SERVER_OPTIONS = SessionSettings(server=WORK_SETTINGS).options() or ""
CONTROL_SERVER_OPTIONS = PLANNER_OPTIONS

# Timeouts. The relay's slowest statements in normal work are a full claim (16 shards x
# 500 rows: 30 ms through the partial index, 560 ms on the worst plan measured) and the
# backlog gauge (0.27 s over a 500,000-row backlog, 10 s on a bad plan before
# random_page_cost was set), and purge deletes purge_batch_size rows a statement: 30 s is
# several times the worst of them, and still ends a statement that hangs long before a
# stuck cycle goes unnoticed. None of them waits on a lock in normal work (claims lock no
# rows; a settle's FOR KEY SHARE on lease rows and a takeover's FOR UPDATE wait only for
# each other's few milliseconds), so a lock wait of 5 s means someone else holds the table
# (a DDL, a LOCK TABLE, an operator's open transaction): the statement fails retriable,
# the cycle backs off and tries again, and lease rounds end well within lease_ttl_s.
# Migrations (`outbox-relay migrate`) run with neither: a CREATE INDEX on a large table
# may legitimately take minutes, and migrators queue on an advisory lock.
STATEMENT_TIMEOUT_S = 30.0
LOCK_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 3600.0

# The databases the relay runs on.
RELAY_DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite", "mariadb")


class DatabaseSettings(SettingsGroup):
    database_url: SecretStr = Field(
        description="Outbox database: postgresql://user:pass@host/db, "
        "mysql://user:pass@host:port/db (MariaDB) or sqlite:///path.db",
    )
    database_url_file: str | None = Field(
        default=None,
        description="File holding the database URL (a mounted secret); wins over database_url.",
    )
    sqlite_wait_for_lock: bool = Field(
        default=False,
        description="SQLite: wait for the relay already running on the file instead of exiting.",
    )
    database_pooler: Pooler = Field(
        default="none",
        description="Postgres: what sits between the relay and the server. none: a direct "
        "connection (or a session pooler that passes the options startup parameter); "
        "transaction: a transaction pooler (PgBouncer pool_mode=transaction): session "
        "settings set in each transaction, no server-side prepared statements, no LISTEN "
        "hints (docs/poolers.md).",
    )
    database_statement_timeout_s: float = Field(
        default=STATEMENT_TIMEOUT_S,
        ge=0.001,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Postgres: statement_timeout of the relay's connections (MariaDB: "
        "max_statement_time); a statement running longer fails and is retried (migrate "
        "runs without it).",
    )
    database_side_statement_timeout_s: float | None = Field(
        default=None,
        ge=0.001,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="statement_timeout (MariaDB: max_statement_time) of the side loops' "
        "connections: backlog gauges, claim floors, horizon, purge. They have connections "
        "of their own, so they never delay a claim, a settle or a lease renewal; a statement "
        "running longer fails and its loop tries again at its next round. Unset: 10 s, or "
        "database_statement_timeout_s if that is lower; at most database_statement_timeout_s.",
    )
    database_lock_timeout_s: float = Field(
        default=LOCK_TIMEOUT_S,
        ge=0.001,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Postgres: lock_timeout of the relay's connections (MariaDB: "
        "innodb_lock_wait_timeout, rounded up to whole seconds, and idle_transaction_timeout: "
        "a relay stopped inside a transaction holds its locks no longer); a statement "
        "waiting longer for a lock someone else holds fails and is retried. At most "
        "database_statement_timeout_s.",
    )
    database_keepalives_idle_s: int = Field(
        default=30,
        ge=1,
        le=7200,
        description="Postgres: TCP keepalives start after this many idle seconds (libpq "
        "keepalives_idle), so a connection to a vanished server or pooler is found dead.",
    )
    database_keepalives_interval_s: int = Field(
        default=10, ge=1, le=600, description="Postgres: seconds between TCP keepalive probes."
    )
    database_keepalives_count: int = Field(
        default=3,
        ge=1,
        le=30,
        description="Postgres: unanswered TCP keepalive probes before the connection is dead.",
    )
    database_tcp_user_timeout_s: float = Field(
        default=30.0,
        ge=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="Postgres: how long sent data may stay unacknowledged before the "
        "connection is dead (libpq tcp_user_timeout; 0: the OS's default, minutes). "
        "Keepalives cover idle connections, this one a statement sent into a cut network.",
    )

    @model_validator(mode="before")
    @classmethod
    def _url_from_file(cls, data: Any) -> Any:
        path = data.get("database_url_file") if isinstance(data, dict) else None
        if not path:
            return data
        return {**data, "database_url": read_url_file(str(path))}

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: SecretStr) -> SecretStr:
        try:
            db = DatabaseUrl.parse(value.get_secret_value())
            supported(db.dialect, "the relay", RELAY_DIALECTS)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _lock_within_statement(self) -> DatabaseSettings:
        if self.database_lock_timeout_s > self.database_statement_timeout_s:
            raise ValueError(
                "database_lock_timeout_s must not exceed database_statement_timeout_s "
                "(the statement would time out first)"
            )
        return self

    @model_validator(mode="after")
    def _side_within_statement(self) -> DatabaseSettings:
        side = self.database_side_statement_timeout_s
        if side is not None and side > self.database_statement_timeout_s:
            raise ValueError(
                "database_side_statement_timeout_s must not exceed "
                "database_statement_timeout_s (it bounds the side loops more tightly)"
            )
        return self

    @model_validator(mode="after")
    def _pooler_on_postgres(self) -> DatabaseSettings:
        # A transaction pooler changes how Postgres sessions are set up; on MariaDB it
        # would be silently ignored, and a proxy's pooling is not what the setting means.
        if self.database_pooler != "none" and self.url.dialect == "mariadb":
            raise ValueError(
                "database_pooler applies to Postgres only: leave it at none on MariaDB"
            )
        return self

    @property
    def url(self) -> DatabaseUrl:
        return DatabaseUrl.parse(self.database_url.get_secret_value())

    def keepalives(self) -> dict[str, str]:
        """libpq connection parameters for every connection, the LISTEN one included."""
        return {
            "keepalives": "1",
            "keepalives_idle": str(self.database_keepalives_idle_s),
            "keepalives_interval": str(self.database_keepalives_interval_s),
            "keepalives_count": str(self.database_keepalives_count),
            "tcp_user_timeout": str(_ms(self.database_tcp_user_timeout_s)),
        }

    def session(
        self, server: Mapping[str, str], *, timeouts: bool = True, side: bool = False
    ) -> SessionSettings:
        """The session settings of a connection: server settings (with the timeouts
        unless told not to; a side loop's statement timeout if side), keepalives, and the
        pooler they travel through."""
        settings = dict(server)
        if timeouts:
            settings["statement_timeout"] = str(_ms(self.statement_timeout_s(side)))
            settings["lock_timeout"] = str(_ms(self.database_lock_timeout_s))
        return SessionSettings(
            server=settings, libpq=self.keepalives(), pooler=self.database_pooler
        )

    def statement_timeout_s(self, side: bool) -> float:
        """The statement timeout of a side loop's connections (side) or the others'."""
        everyone = self.database_statement_timeout_s
        if not side:
            return everyone
        chosen = self.database_side_statement_timeout_s
        return min(SIDE_STATEMENT_TIMEOUT_S, everyone) if chosen is None else chosen


def _ms(seconds: float) -> int:
    # Postgres counts these in milliseconds; 0 would mean "no timeout", never wanted here.
    return max(1, round(seconds * 1000)) if seconds else 0


def read_url_file(path: str) -> str:
    """A database URL from a file (a mounted secret); surrounding whitespace is dropped."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the database URL file {path}: {exc.strerror}") from None


def make_store(settings: DatabaseSettings, lanes: int = 1, replica: str | None = None) -> SqlStore:
    """lanes: the pipeline's lanes (pipeline/loop.py); each gets work connections of its own.
    replica: the replica id a MariaDB session carries (session_init)."""
    db = settings.url
    if db.dialect == "sqlite":
        return SqlStore(
            SqliteThread(db.url),
            file_lock=RelayFileLock(db.url, wait=settings.sqlite_wait_for_lock),
            sqlite_path=db.url,
        )
    if db.dialect not in ("postgres", "mariadb"):
        raise unsupported(db.dialect, "the relay")
    pools = {role: _pool(settings, role, lanes, replica) for role in POOL_ROLES}
    return SqlStore(pools["work"], pools["control"], pools["side"])


def _pool(settings: DatabaseSettings, role: PoolRole, lanes: int, replica: str | None) -> AsyncPool:
    db, side = settings.url, role == "side"
    size = {
        "work": WORK_CONNECTIONS * lanes,
        "control": CONTROL_CONNECTIONS,
        "side": SIDE_CONNECTIONS,
    }[role]
    checkout_s = CONTROL_CHECKOUT_S if role == "control" else WORK_CHECKOUT_S
    if db.dialect == "mariadb":
        # The timeouts as the server's own: a lock wait ends with a retriable error after
        # database_lock_timeout_s, a statement after its pool's timeout (max_statement_time).
        init = session_init(
            settings.database_lock_timeout_s, settings.statement_timeout_s(side), replica
        )
        return MariadbPool(
            db.url,
            max_size=size,
            checkout_timeout_s=checkout_s,
            open_wait_s=OPEN_WAIT_S,
            init_command=init,
        )
    return AsyncpgPool(
        db.url,
        max_size=size,
        checkout_timeout_s=checkout_s,
        open_wait_s=OPEN_WAIT_S,
        session=settings.session(WORK_SETTINGS if role == "work" else PLANNER_SETTINGS, side=side),
    )
