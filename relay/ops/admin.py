"""Operator actions behind `outbox-relay status|parked|replay`: read and repair the outbox.

Each action opens its own connection, runs named queries in one transaction and commits.
Parked rows are not worked by any relay, so changing them needs no lease. Behind a
transaction pooler (pooler="transaction") the transaction begins with the session
settings; operator actions run without the relay's statement and lock timeouts (a
discard of millions of rows may rightly take longer, and an operator can interrupt it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from outbox_core.codec import codec_for
from outbox_core.database_url import DatabaseUrl
from outbox_core.errors import StartupParameterRefused
from outbox_core.executors import PsycopgExecutor, Rows, SqliteExecutor, Statement, translated
from outbox_core.pg_session import Pooler
from relay.database import PLANNER_SETTINGS, DatabaseSettings
from relay.errors import PoolerRefused
from relay.store import Backlog, Lease


@dataclass(frozen=True)
class Status:
    shard_count: int
    pending: int
    parked: int
    oldest_pending_age_s: float
    replicas: list[str]
    leases: list[Lease]


@dataclass(frozen=True)
class ParkedRow:
    id: int
    event_id: str
    topic: str
    key: str
    event_type: str
    attempts: int
    last_error: str | None
    age_s: float


# The most rows one listing or action takes when a limit is given; --all has none.
MAX_LIMIT = 1_000_000
_UNBOUNDED = 2**62  # LIMIT for "every row" (a NULL limit is not portable)


@dataclass(frozen=True)
class RowFilter:
    """Which rows an action applies to; None means any. At least one criterion for writes.
    limit None: every matching row."""

    ids: list[int] | None = None
    topic: str | None = None
    key: str | None = None
    error: str | None = None
    min_age_s: float = 0.0
    limit: int | None = 1000

    @property
    def narrowed(self) -> bool:
        return bool(self.ids or self.topic or self.key or self.error or self.min_age_s)


@dataclass(frozen=True)
class Changed:
    ids: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)  # asked for by id, not eligible


class _Session:
    """One connection and one transaction, committed when the action succeeds."""

    def __init__(self, database_url: str, pooler: Pooler = "none") -> None:
        db = DatabaseUrl.parse(database_url)
        # The relay's own planner settings: `status` runs the gauges' backlog query.
        session = DatabaseSettings(
            database_url=SecretStr(database_url), database_pooler=pooler
        ).session(PLANNER_SETTINGS, timeouts=False)
        try:
            with translated():  # driver errors leave as OutboxError, like every query's
                self.conn: Any = db.connect(session=session)
        except StartupParameterRefused as exc:
            raise PoolerRefused(exc) from exc
        self.executor = (
            PsycopgExecutor(self.conn) if db.dialect == "postgres" else SqliteExecutor(self.conn)
        )
        self.codec = codec_for(db.dialect)
        if db.dialect == "postgres" and session.per_transaction:
            try:
                self.executor.run(session.local_settings())  # opens the transaction
            except Exception:
                self.conn.close()
                raise

    def run(self, name: str, params: dict[str, Any] | None = None) -> Rows:
        return self.executor.run(Statement(name, params or {}))

    def ids(self, ids: Sequence[int] | None) -> Any:
        return self.codec.array(ids)

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
        shard_count = int(s.run("setting_get", {"name": "shard_count"})[0][0])
        shards = list(range(shard_count))
        # No floors here: `status` walks each shard from the bottom, as claims once did.
        params = {"shard_count": shard_count, "shards": shards, "floors": [0] * shard_count}
        backlog = Backlog.from_row(s.run("outbox_backlog", params)[0])
        leases = [Lease.from_row(r) for r in s.run("lease_list")]
        replicas = [str(r[0]) for r in s.run("replica_list_live")]
    return Status(
        shard_count,
        backlog.pending,
        backlog.parked,
        backlog.oldest_pending_age_s,
        replicas,
        leases,
    )


def _parked(s: _Session, f: RowFilter) -> list[ParkedRow]:
    rows = s.run(
        "outbox_parked_list",
        {
            "ids": s.ids(f.ids),
            "topic": f.topic,
            "key": f.key,
            "error": f.error,
            "min_age_s": s.codec.seconds(f.min_age_s),
            "limit": _UNBOUNDED if f.limit is None else f.limit,
        },
    )
    return [
        ParkedRow(int(a), str(b), c, d, e, int(g), h, float(i)) for a, b, c, d, e, g, h, i in rows
    ]


def parked_list(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> list[ParkedRow]:
    with _Session(database_url, pooler) as s:
        return _parked(s, f)


def _act(s: _Session, query_name: str, ids: Sequence[int]) -> list[int]:
    return sorted(int(r[0]) for r in s.run(query_name, {"ids": s.ids(ids)})) if ids else []


_PARKED_ACTIONS = {"retry": "outbox_parked_retry", "discard": "outbox_parked_discard"}


def _change(database_url: str, f: RowFilter, action: str, pooler: Pooler) -> Changed:
    with _Session(database_url, pooler) as s:
        done = _act(s, _PARKED_ACTIONS[action], [row.id for row in _parked(s, f)])
    return Changed(done, sorted(set(f.ids or []) - set(done)))


def parked_retry(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> Changed:
    """The matching parked rows pending again, chosen and changed in one transaction."""
    return _change(database_url, f, "retry", pooler)


def parked_discard(database_url: str, f: RowFilter, *, pooler: Pooler = "none") -> Changed:
    """The matching parked rows deleted, chosen and deleted in one transaction."""
    return _change(database_url, f, "discard", pooler)


def parked_act(
    database_url: str, action: str, ids: Sequence[int], *, pooler: Pooler = "none"
) -> Changed:
    """retry or discard exactly these rows (those still parked), in one transaction: what
    an operator was shown and confirmed, never what a filter matches by now. missing: the
    ids that were no longer parked."""
    with _Session(database_url, pooler) as s:
        done = _act(s, _PARKED_ACTIONS[action], ids)
    return Changed(done, sorted(set(ids) - set(done)))


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
        chosen = s.run(
            "outbox_replay_list",
            {
                "ids": s.ids(ids),
                "since": s.codec.time(since),
                "until": s.codec.time(until),
                "limit": limit,
            },
        )
    return [int(r[0]) for r in chosen]


def replay_ids(database_url: str, ids: Sequence[int], *, pooler: Pooler = "none") -> Changed:
    """Exactly these retained rows pending again, in one transaction; missing: those not
    (or no longer) retained."""
    with _Session(database_url, pooler) as s:
        done = _act(s, "outbox_replay", ids)
    return Changed(done, sorted(set(ids) - set(done)))
