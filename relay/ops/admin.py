"""Operator actions behind `outbox-relay status|parked|replay`: read and repair the outbox.

Each action opens its own connection, runs the store's plans (relay/store/plans.py, where
their parameters are encoded and their rows decoded for the Store too) in one transaction
and commits. Parked rows are not worked by any relay, so changing them needs no lease.
Behind a transaction pooler (pooler="transaction") the transaction begins with the session
settings; operator actions run without the relay's statement and lock timeouts (a
discard of millions of rows may rightly take longer, and an operator can interrupt it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from outbox_core.codec import codec_for
from outbox_core.database_url import DatabaseUrl, Dialect, supported
from outbox_core.errors import StartupParameterRefused
from outbox_core.executors import (
    Plan,
    PsycopgExecutor,
    PyMysqlExecutor,
    SqliteExecutor,
    SyncExecutor,
    run_plan,
    translated,
)
from outbox_core.pg_session import Pooler
from relay.database import PLANNER_SETTINGS, RELAY_DIALECTS, DatabaseSettings
from relay.errors import PoolerRefused
from relay.store import MAX_LIMIT, Changed, Lease, ParkedRow, ReplayFilter, RowFilter, plans
from relay.store.plans import ParkedAction

__all__ = [
    "MAX_LIMIT",
    "Changed",
    "ParkedRow",
    "RowFilter",
    "Status",
    "parked_act",
    "parked_discard",
    "parked_list",
    "parked_retry",
    "replay_ids",
    "replay_list",
    "status",
]


@dataclass(frozen=True)
class Status:
    shard_count: int
    pending: int
    parked: int
    oldest_pending_age_s: float
    replicas: list[str]
    leases: list[Lease]


# The executor of each dialect's connection (DatabaseUrl.connect's driver).
_EXECUTORS: dict[Dialect, Callable[[Any], SyncExecutor]] = {
    "postgres": PsycopgExecutor,
    "sqlite": SqliteExecutor,
    "mariadb": PyMysqlExecutor,
}


class _Session:
    """One connection and one transaction, committed when the action succeeds."""

    def __init__(self, database_url: str, pooler: Pooler = "none") -> None:
        db = DatabaseUrl.parse(database_url)
        supported(db.dialect, "the relay's commands", RELAY_DIALECTS)
        # The relay's own planner settings: `status` runs the gauges' backlog query.
        session = DatabaseSettings(
            database_url=SecretStr(database_url), database_pooler=pooler
        ).session(PLANNER_SETTINGS, timeouts=False)
        try:
            with translated():  # driver errors leave as OutboxError, like every query's
                self.conn: Any = db.connect(session=session)
        except StartupParameterRefused as exc:
            raise PoolerRefused(exc) from exc
        self.executor: SyncExecutor = _EXECUTORS[db.dialect](self.conn)
        self.codec = codec_for(db.dialect)
        if db.dialect == "postgres" and session.per_transaction:
            try:
                self.executor.run(session.local_settings())  # opens the transaction
            except Exception:
                self.conn.close()
                raise

    def run(self, plan: Plan) -> Any:
        return run_plan(plan, self.executor)

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        with translated():
            try:
                if kind is None:
                    self.conn.commit()
                else:
                    self.conn.rollback()
            finally:
                self.conn.close()


def status(database_url: str, *, pooler: Pooler = "none") -> Status:
    with _Session(database_url, pooler) as s:
        shard_count: int = s.run(plans.shard_count())
        # No floors here: `status` walks each shard from the bottom, as claims once did.
        backlog = s.run(plans.backlog(s.codec, shard_count, {}))
        leases = s.run(plans.lease_list())
        replicas = s.run(plans.replica_list_live())
    return Status(
        shard_count,
        backlog.pending,
        backlog.parked,
        backlog.oldest_pending_age_s,
        replicas,
        leases,
    )


def parked_list(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> list[ParkedRow]:
    with _Session(database_url, pooler) as s:
        found: list[ParkedRow] = s.run(plans.parked_list(s.codec, f))
    return found


def _change(database_url: str, f: RowFilter, action: ParkedAction, pooler: Pooler) -> Changed:
    with _Session(database_url, pooler) as s:
        listed = s.run(plans.parked_list(s.codec, f))
        done: Changed = s.run(plans.parked_act(s.codec, action, [row.id for row in listed]))
    return Changed(done.ids, sorted(set(f.ids or []) - set(done.ids)))


def parked_retry(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> Changed:
    """The matching parked rows pending again, chosen and changed in one transaction."""
    return _change(database_url, f, "retry", pooler)


def parked_discard(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> Changed:
    """The matching parked rows deleted, chosen and deleted in one transaction."""
    return _change(database_url, f, "discard", pooler)


def parked_act(
    database_url: str, action: ParkedAction, ids: Sequence[int], *, pooler: Pooler = "none"
) -> Changed:
    """retry or discard exactly these rows (those still parked), in one transaction: what
    an operator was shown and confirmed, never what a filter matches by now. missing: the
    ids that were no longer parked."""
    with _Session(database_url, pooler) as s:
        changed: Changed = s.run(plans.parked_act(s.codec, action, ids))
    return changed


def replay_list(
    database_url: str,
    *,
    ids: list[int] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    limit: int = 1000,
    pooler: Pooler = "none",
) -> list[int]:
    """The ids of the retained rows a replay with these criteria would publish again."""
    with _Session(database_url, pooler) as s:
        chosen: list[int] = s.run(
            plans.replay_list(s.codec, ReplayFilter(ids, since, until, limit))
        )
    return chosen


def replay_ids(database_url: str, ids: Sequence[int], *, pooler: Pooler = "none") -> Changed:
    """Exactly these retained rows pending again, in one transaction; missing: those not
    (or no longer) retained."""
    with _Session(database_url, pooler) as s:
        changed: Changed = s.run(plans.replay(s.codec, ids))
    return changed
