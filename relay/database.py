"""The relay's database: its settings group, and the store built from them (the pools the
shard workers and the control loops use on Postgres, or one SQLite connection)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from outbox_core.database_url import DatabaseUrl
from outbox_core.errors import ConfigurationError
from outbox_core.pg_pool import PostgresPool
from outbox_core.settings import SettingsGroup
from outbox_core.sqlite_thread import SqliteThread
from relay.sql_store import SqlStore
from relay.sqlite_lock import RelayFileLock

# Postgres pools: the shard workers' and a small one of their own for leases, membership
# and gauges, which must not queue behind slow claims or every lease expires at once.
WORK_CONNECTIONS = 8
CONTROL_CONNECTIONS = 2
OPEN_WAIT_S = 30.0
WORK_CHECKOUT_S = 30.0
# Control calls fail fast while the server is away, so a heartbeat round reports it
# within seconds instead of queueing past the lease.
CONTROL_CHECKOUT_S = 5.0
# The shard workers' settles commit without waiting for the WAL flush (a disk round trip
# per batch, most of a settle's time). A settle lost to a database crash (the last few
# hundred milliseconds of them at most) leaves its rows pending, so they are published
# again: duplicates around a crash, which the relay's guarantee already allows, never a
# loss. Leases, membership and everything else commit synchronously.
WORK_SERVER_OPTIONS = "-c synchronous_commit=off"


class DatabaseSettings(SettingsGroup):
    database_url: SecretStr = Field(
        description="Outbox database: postgresql://user:pass@host/db or sqlite:///path.db",
    )
    sqlite_wait_for_lock: bool = Field(
        default=False,
        description="SQLite: wait for the relay already running on the file instead of exiting.",
    )

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


def make_store(settings: DatabaseSettings) -> SqlStore:
    db = settings.url
    if db.dialect == "postgres":
        return SqlStore(
            PostgresPool(
                db.url,
                max_size=WORK_CONNECTIONS,
                checkout_timeout_s=WORK_CHECKOUT_S,
                open_wait_s=OPEN_WAIT_S,
                server_options=WORK_SERVER_OPTIONS,
            ),
            PostgresPool(
                db.url,
                max_size=CONTROL_CONNECTIONS,
                checkout_timeout_s=CONTROL_CHECKOUT_S,
                open_wait_s=OPEN_WAIT_S,
            ),
        )
    return SqlStore(
        SqliteThread(db.url),
        file_lock=RelayFileLock(db.url, wait=settings.sqlite_wait_for_lock),
        sqlite_path=db.url,
    )
