"""Fault-injection helpers: writers that remember what committed, a fleet of relay
processes, a settle audit, lease views, service restarts and bounded waits, on Postgres
and on MariaDB (the Backend given says which).

Every loop here is bounded in time (and the writers in count): a test that waits for
something that never happens fails with a message instead of hanging.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pymysql  # type: ignore[import-untyped, import-not-found, unused-ignore]
import sqlalchemy
import sqlalchemy.exc
from sqlalchemy.pool import NullPool

from outbox_core.queries import parse_blocks
from producer_lib import Event, Outbox, OutboxError
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.relay import RelayProcess, Verdict, judge, relay_env, wait_drained
from tests.support.services import services
from tests.support.waits import until


def _load(name: str) -> dict[str, str]:
    return parse_blocks((Path(__file__).parent / "sql" / name).read_text(), name)


FAULTS_SQL = _load("faults.sql")
MARIADB_FAULTS_SQL = _load("mariadb_faults.sql")


def faults_sql(backend: Backend, name: str) -> str:
    """The named block in the backend's dialect: MariaDB's twin where it has one."""
    if backend.dialect == "mariadb" and name in MARIADB_FAULTS_SQL:
        return MARIADB_FAULTS_SQL[name]
    return FAULTS_SQL[name]


# --------------------------------------------------------------------------- database reads


def fetch(
    backend: Backend, name: str, params: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    return backend.run(faults_sql(backend, name), params)


def scalar(backend: Backend, name: str) -> Any:
    return fetch(backend, name)[0][0]


def install_settle_audit(backend: Backend) -> None:
    if backend.dialect == "mariadb":
        for name, sql in MARIADB_FAULTS_SQL.items():
            if name.startswith("settle_audit_install"):
                backend.run(sql)
        return
    # Several statements in one: psycopg sends them so only without parameters.
    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute(FAULTS_SQL["settle_audit_install"])


def audit_violations(backend: Backend) -> list[tuple[Any, ...]]:
    """Rows changed by a relay that did not hold their shard's lease at that moment."""
    return fetch(backend, "settle_audit_violations")


def settled_by(backend: Backend) -> dict[str, int]:
    return {str(w): int(n) for w, n in fetch(backend, "settle_audit_by_writer")}


@dataclass(frozen=True)
class LeaseView:
    owners: dict[int, str | None]  # shard -> live owner (None: free or expired)
    tokens: dict[int, int]

    def split(self) -> dict[str | None, int]:
        return dict(Counter(self.owners.values()))


def leases(backend: Backend) -> LeaseView:
    rows = fetch(backend, "lease_live")
    return LeaseView(
        owners={int(s): (str(o) if o is not None and live else None) for s, o, _, live in rows},
        tokens={int(s): int(t) for s, _, t, _ in rows},
    )


def fair_split_of(owners: list[str], shard_count: int) -> list[int]:
    """Shard counts per owner, largest first, that leases.fair_share produces."""
    n = len(owners)
    return sorted(
        (shard_count // n + (1 if i < shard_count % n else 0) for i in range(n)), reverse=True
    )


# --------------------------------------------------------------------------- waiting


async def wait_split(
    backend: Backend, owners: list[str], timeout: float = 30, shard_count: int = 16
) -> LeaseView:
    """Until the live leases are split fairly among exactly `owners`, every shard held."""
    want = fair_split_of(owners, shard_count)

    def check() -> LeaseView | None:
        view = leases(backend)
        split = view.split()
        if None in split or set(split) != set(owners):
            return None
        return view if sorted(split.values(), reverse=True) == want else None

    result: LeaseView = await until(
        check,
        timeout,
        f"leases split {want} among {owners} (now {leases(backend).split()})",
        blocking=True,
    )
    return result


# --------------------------------------------------------------------------- relay fleet


def named_relay_env(backend: Backend, bootstrap: str, name: str, **over: Any) -> dict[str, str]:
    """relay_env with a fixed replica id, also sent as Postgres application_name (audit);
    on MariaDB the relay's sessions carry it by themselves (@outbox_replica_id)."""
    env = relay_env(backend, bootstrap, replica_id=name, **over)
    env["PGAPPNAME"] = name
    return env


class RelayFleet:
    """Relay subprocesses of one test; whatever is still running at teardown is killed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: dict[str, RelayProcess] = {}

    def start(self, name: str, env: dict[str, str], module: str = "relay.cli") -> RelayProcess:
        proc = RelayProcess(env, self.folder / f"relay-{name}.log", module=module)
        self.procs[name] = proc
        return proc

    def logs(self) -> str:
        return "\n".join(f"=== {n}\n{p.log()[-4000:]}" for n, p in self.procs.items())

    async def drained(self, backend: Backend, timeout: float) -> None:
        """wait_drained, with the relays' logs in the failure (what held the rows back)."""
        try:
            await wait_drained(backend, timeout)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from exc

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.running:
                with contextlib.suppress(Exception):
                    proc.kill()


# --------------------------------------------------------------------------- writers


@dataclass
class WriteLog:
    """What the writers know: committed, rolled back, or lost at COMMIT (outcome unknown)."""

    committed: dict[str, tuple[int, str]] = field(default_factory=dict)  # event_id -> (id, key)
    uncertain: dict[str, tuple[int, str]] = field(default_factory=dict)
    rolled_back: set[str] = field(default_factory=set)
    transactions: int = 0
    errors: int = 0

    def expected_order(self, delivered: set[str] | None = None) -> dict[str, list[str]]:
        """Per key, event_ids in id order (= commit order under the per-key lock).

        Events whose COMMIT outcome is unknown count when they were delivered.
        """
        rows = dict(self.committed)
        if delivered is not None:
            rows.update({e: r for e, r in self.uncertain.items() if e in delivered})
        by_key: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for event_id, (row_id, key) in rows.items():
            by_key[key].append((row_id, event_id))
        return {k: [e for _, e in sorted(v)] for k, v in by_key.items()}


def delivery_problems(verdict: Verdict, log: WriteLog) -> list[str]:
    """Guarantees (1) and (2) as a deduplicating consumer sees them."""
    problems: list[str] = []
    missing = set(log.committed) - verdict.delivered
    if missing:
        problems.append(
            f"{len(missing)} committed events never published, e.g. {sorted(missing)[:3]}"
        )
    phantom = verdict.delivered - set(log.committed) - set(log.uncertain)
    if phantom & log.rolled_back:
        problems.append(f"{len(phantom & log.rolled_back)} rolled-back events published")
    if phantom - log.rolled_back:
        problems.append(f"{len(phantom - log.rolled_back)} events published that nobody wrote")
    if verdict.order_violations:
        problems.append(
            f"{len(verdict.order_violations)} order violations, e.g. {verdict.order_violations[:3]}"
        )
    return problems


async def judge_log(bootstrap: str, topic: str, log: WriteLog) -> Verdict:
    """Read the topic whole and judge it against what the writers committed."""
    records = await read_topic(bootstrap, topic, timeout=90)
    delivered = {(r.header("event_id") or b"").decode() for r in records}
    return judge(records, log.expected_order(delivered))


# What a writer survives: the database going away, on either driver.
WRITE_ERRORS = (psycopg.Error, pymysql.err.Error, sqlalchemy.exc.SQLAlchemyError, OutboxError)


class WriterDatabase:
    """How a writer thread talks to the backend: psycopg on Postgres; on MariaDB a
    SQLAlchemy Connection on PyMySQL (what an application using SQLAlchemy hands emit)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.row_ids_sql = faults_sql(backend, "event_row_ids")
        self.engine: sqlalchemy.Engine | None = None
        if backend.dialect == "mariadb":
            # NullPool: a connection closed after an error is gone, never handed out again.
            self.engine = sqlalchemy.create_engine(
                backend.sqlalchemy_url, poolclass=NullPool, connect_args={"connect_timeout": 5}
            )

    def connect(self) -> Any:
        if self.engine is not None:
            return self.engine.connect()
        return psycopg.connect(self.backend.target, connect_timeout=5)

    def row_ids(self, conn: Any, ids: list[Any]) -> dict[str, tuple[int, str]]:
        """event_id -> (row id, key) of the events just emitted on conn."""
        if self.engine is not None:
            rows = conn.exec_driver_sql(self.row_ids_sql, {"ids": tuple(map(str, ids))}).all()
        else:
            rows = conn.execute(self.row_ids_sql, {"ids": ids}).fetchall()
        return {str(e): (int(i), str(k)) for i, e, k in rows}

    def dispose(self) -> None:
        if self.engine is not None:
            self.engine.dispose()


class Writers:
    """Threads committing outbox events until stopped (or max_events, max_seconds).

    Each transaction emits 1..n events over `keys` keys, reads back their row ids, may
    sleep before COMMIT (out-of-order commits) and rolls back with rollback_rate. Database
    errors (a restarting server) are survived: the writer reconnects with a pause; a COMMIT
    that fails leaves its events `uncertain`.
    """

    def __init__(
        self,
        backend: Backend,
        topic: str,
        *,
        threads: int = 2,
        keys: int = 100,
        events_per_tx: tuple[int, int] = (1, 5),
        rollback_rate: float = 0.05,
        pause_before_commit_s: tuple[float, float] = (0.0, 0.0),
        pause_between_s: float = 0.01,
        max_events: int = 100_000,
        max_seconds: float = 600.0,
        seed: int = 0,
    ) -> None:
        self.db = WriterDatabase(backend)
        self.topic = topic
        self.keys = keys
        self.events_per_tx = events_per_tx
        self.rollback_rate = rollback_rate
        self.pause_before_commit_s = pause_before_commit_s
        self.pause_between_s = pause_between_s
        self.max_events = max_events
        self.max_seconds = max_seconds
        self.log = WriteLog()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._failures: list[BaseException] = []
        self._threads = [
            threading.Thread(
                target=self._run, args=(seed * 1000 + i,), name=f"writer-{i}", daemon=True
            )
            for i in range(threads)
        ]
        self._started = False

    def __enter__(self) -> Writers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Writers:
        self._started = True
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 60) -> WriteLog:
        self._stop.set()
        if self._started:
            deadline = time.monotonic() + timeout
            for t in self._threads:
                t.join(max(0.1, deadline - time.monotonic()))
            alive = [t.name for t in self._threads if t.is_alive()]
            if alive:
                raise AssertionError(f"writer threads did not stop: {alive}")
        self.db.dispose()
        if self._failures:
            raise AssertionError(f"a writer failed: {self._failures[0]!r}") from self._failures[0]
        return self.log

    @property
    def running(self) -> bool:
        """True while every writer thread is still writing (none hit its count or time limit)."""
        return all(t.is_alive() for t in self._threads)

    @property
    def committed(self) -> int:
        with self._lock:
            return len(self.log.committed)

    @property
    def errors(self) -> int:
        """Transactions that failed on the database (a restarting server)."""
        with self._lock:
            return self.log.errors

    async def wait_committed(self, n: int, timeout: float = 60) -> None:
        await until(lambda: self.committed >= n, timeout, f"{n} committed events")

    def _run(self, seed: int) -> None:
        try:
            self._loop(random.Random(seed))
        except BaseException as exc:  # surfaced by stop()
            self._failures.append(exc)

    def _loop(self, rng: random.Random) -> None:
        outbox = Outbox()
        deadline = time.monotonic() + self.max_seconds
        conn: Any = None
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                with self._lock:
                    written = len(self.log.committed) + len(self.log.rolled_back)
                if written >= self.max_events:
                    return
                size = rng.randint(*self.events_per_tx)
                events = [
                    Event(
                        self.topic,
                        f"key-{rng.randrange(self.keys)}",
                        "Written",
                        {"r": rng.random()},
                    )
                    for _ in range(size)
                ]
                rollback = rng.random() < self.rollback_rate
                pause = rng.uniform(*self.pause_before_commit_s)
                in_commit = False
                found: dict[str, tuple[int, str]] = {}
                try:
                    if conn is None:
                        conn = self.db.connect()
                    found = self.db.row_ids(conn, outbox.emit_batch(conn, events))
                    if pause:
                        time.sleep(pause)
                    if rollback:
                        conn.rollback()
                        with self._lock:
                            self.log.rolled_back.update(found)
                            self.log.transactions += 1
                    else:
                        in_commit = True
                        conn.commit()
                        with self._lock:
                            self.log.committed.update(found)
                            self.log.transactions += 1
                except WRITE_ERRORS:
                    with self._lock:
                        self.log.errors += 1
                        if in_commit:
                            self.log.uncertain.update(found)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            conn.close()
                    conn = None
                    self._stop.wait(0.3)
                    continue
                if self.pause_between_s:
                    self._stop.wait(self.pause_between_s)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


# --------------------------------------------------------------------------- services


@contextlib.contextmanager
def broker_paused() -> Iterator[None]:
    """SIGSTOPs the Kafka broker (it hangs, its connections stay open); SIGCONT on exit,
    even on failure."""
    services("pause", "--only", "kafka")
    try:
        yield
    finally:
        services("resume", "--only", "kafka")


@contextlib.contextmanager
def service_down(name: str) -> Iterator[None]:
    """Stops one service (postgres, mariadb or kafka); starts it again on exit, even on
    failure."""
    services("down", "--only", name)
    try:
        yield
    finally:
        services("up", "--only", name)
