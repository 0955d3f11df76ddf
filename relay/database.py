"""The relay's database: its settings group, and the store built from them (the pools the
cycle and the control loops use on Postgres, or one SQLite connection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from outbox_core.database_url import DatabaseUrl
from outbox_core.errors import ConfigurationError
from outbox_core.pg_pool import PostgresPool
from outbox_core.settings import SettingsGroup
from outbox_core.sqlite_thread import SqliteThread
from relay.store.file_lock import RelayFileLock
from relay.store.sql import SqlStore

# Postgres pools: the cycle's (one claim or settle at a time, and a spare) and a small one
# of their own for leases, membership and gauges, which must not queue behind slow claims
# or every lease expires at once.
WORK_CONNECTIONS = 2
CONTROL_CONNECTIONS = 2
OPEN_WAIT_S = 30.0
WORK_CHECKOUT_S = 30.0
# Control calls fail fast while the server is away, so a heartbeat round reports it
# within seconds instead of queueing past the lease.
CONTROL_CHECKOUT_S = 5.0
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
PLANNER_OPTIONS = "-c random_page_cost=1.1 -c jit=off"
WORK_SERVER_OPTIONS = f"-c synchronous_commit=off {PLANNER_OPTIONS}"
CONTROL_SERVER_OPTIONS = PLANNER_OPTIONS


class DatabaseSettings(SettingsGroup):
    database_url: SecretStr = Field(
        description="Outbox database: postgresql://user:pass@host/db or sqlite:///path.db",
    )
    database_url_file: str | None = Field(
        default=None,
        description="File holding the database URL (a mounted secret); wins over database_url.",
    )
    sqlite_wait_for_lock: bool = Field(
        default=False,
        description="SQLite: wait for the relay already running on the file instead of exiting.",
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
            DatabaseUrl.parse(value.get_secret_value())
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def url(self) -> DatabaseUrl:
        return DatabaseUrl.parse(self.database_url.get_secret_value())


def read_url_file(path: str) -> str:
    """A database URL from a file (a mounted secret); surrounding whitespace is dropped."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the database URL file {path}: {exc.strerror}") from None


def make_store(settings: DatabaseSettings, lanes: int = 1) -> SqlStore:
    """lanes: the pipeline's lanes (pipeline/loop.py); each gets work connections of its own."""
    db = settings.url
    if db.dialect == "postgres":
        return SqlStore(
            PostgresPool(
                db.url,
                max_size=WORK_CONNECTIONS * lanes,
                checkout_timeout_s=WORK_CHECKOUT_S,
                open_wait_s=OPEN_WAIT_S,
                server_options=WORK_SERVER_OPTIONS,
            ),
            PostgresPool(
                db.url,
                max_size=CONTROL_CONNECTIONS,
                checkout_timeout_s=CONTROL_CHECKOUT_S,
                open_wait_s=OPEN_WAIT_S,
                server_options=CONTROL_SERVER_OPTIONS,
            ),
        )
    return SqlStore(
        SqliteThread(db.url),
        file_lock=RelayFileLock(db.url, wait=settings.sqlite_wait_for_lock),
        sqlite_path=db.url,
    )
