"""Store on SQLite: one relay per database file, WAL mode, BEGIN IMMEDIATE for changes.

sqlite3 is synchronous, so every call runs on one dedicated thread; the connection is
never shared with another thread. A second relay on the same file is refused (or waits,
with sqlite_wait_for_lock) through an OS file lock that dies with its process.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from producer_lib.connect import SQLITE_BUSY_TIMEOUT_S
from producer_lib.queries import Dialect, query
from relay.errors import LeaseLost, StartupRefused, StoreUnavailable
from relay.store import AppliedMigration, Backlog, ClaimedRow, Failure, Lease, Policy, Settled

T = TypeVar("T")
Rows = list[tuple[Any, ...]]


class SqliteStore:
    dialect: Dialect = "sqlite"

    def __init__(self, path: str, *, wait_for_lock: bool = False) -> None:
        self._path = path
        self._wait = wait_for_lock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None

    # ---------------------------------------------------------------- plumbing

    async def _call(self, fn: Callable[[], T], what: str) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, fn)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailable("the SQLite store is not open")
        return self._conn

    def _q(self, name: str, params: Mapping[str, Any] | None = None) -> Rows:
        return [
            tuple(r) for r in self._db().execute(query("sqlite", name), params or {}).fetchall()
        ]

    def _in_write_tx(self, body: Callable[[], T]) -> T:
        self._q("database_begin_immediate")
        try:
            result = body()
        except BaseException:
            self._q("database_rollback")
            raise
        self._q("database_commit")
        return result

    async def _take_relay_lock(self) -> None:
        fd = os.open(f"{self._path}.relay-lock", os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self._wait:
                    os.close(fd)
                    raise StartupRefused(
                        f"another relay is already running on {self._path} (SQLite allows one "
                        "relay per database file); stop it, or set sqlite_wait_for_lock to wait"
                    ) from None
                await asyncio.sleep(0.5)
        self._lock_fd = fd

    async def open(self) -> None:
        if not await asyncio.to_thread(os.path.exists, self._path):
            raise StartupRefused(f"SQLite database {self._path} does not exist: run migrate first")
        await self._take_relay_lock()

        def connect() -> None:
            conn = sqlite3.connect(
                self._path,
                timeout=SQLITE_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._conn = conn
            self._q("database_wal_enable")

        await self._call(connect, "open")

    async def close(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._call(close, "close")
        self._thread.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ---------------------------------------------------------------- reads

    async def migrations(self) -> list[AppliedMigration]:
        def read() -> list[AppliedMigration]:
            try:
                rows = self._q("migration_list")
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []
                raise
            return [AppliedMigration(int(v), str(n), str(c)) for v, n, c in rows]

        return await self._call(read, "migration_list")

    async def shard_count(self) -> int:
        rows = await self._call(
            lambda: self._q("setting_get", {"name": "shard_count"}), "setting_get"
        )
        return int(rows[0][0]) if rows else 0

    async def max_pending_shard(self) -> int:
        return int(
            (await self._call(lambda: self._q("outbox_shard_max"), "outbox_shard_max"))[0][0]
        )

    async def claim(self, shard: int, limit: int, policy: Policy) -> list[ClaimedRow]:
        name = "outbox_claim_batch" if policy == "block_key" else "outbox_claim_batch_skip"
        rows = await self._call(lambda: self._q(name, {"shard": shard, "limit": limit}), name)
        return [
            ClaimedRow(int(i), str(e), t, k, et, bytes(p), h, int(a), float(c))
            for i, e, t, k, et, p, h, a, c in rows
        ]

    # ---------------------------------------------------------------- writes

    async def settle(
        self,
        shard: int,
        owner: str,
        token: int,
        published_ids: Sequence[int],
        failures: Sequence[Failure],
        keep: bool,
    ) -> Settled:
        def body() -> Settled:
            fence = {"shard": shard, "owner": owner, "token": token}
            if not self._q("lease_check", fence)[0][0]:
                raise LeaseLost(shard)
            db = self._db()
            ids = json.dumps(list(published_ids))
            name = "outbox_mark_published" if keep else "outbox_delete_published"
            published = db.execute(query("sqlite", name), {"shard": shard, "ids": ids}).rowcount
            failed = 0
            for f in failures:
                failed += db.execute(
                    query("sqlite", "outbox_record_failure"),
                    {
                        "shard": shard,
                        "id": f.id,
                        "error": f.error,
                        "delay_s": f"{f.delay_s:.3f}",
                        "park": f.park,
                    },
                ).rowcount
            return Settled(published, failed)

        return await self._call(lambda: self._in_write_tx(body), "settle")

    async def lease_acquire(self, shard: int, owner: str, ttl_s: float) -> int | None:
        params = {"shard": shard, "owner": owner, "ttl_s": f"{ttl_s:.3f}"}
        rows = await self._call(
            lambda: self._in_write_tx(lambda: self._q("lease_acquire", params)), "lease_acquire"
        )
        return int(rows[0][0]) if rows else None

    async def lease_renew(self, owner: str, held: Mapping[int, int], ttl_s: float) -> set[int]:
        if not held:
            return set()
        params = {"owner": owner, "held": json.dumps(list(held.items())), "ttl_s": f"{ttl_s:.3f}"}
        rows = await self._call(
            lambda: self._in_write_tx(lambda: self._q("lease_renew", params)), "lease_renew"
        )
        return {int(r[0]) for r in rows}

    async def lease_release(self, shard: int, owner: str, token: int) -> None:
        params = {"shard": shard, "owner": owner, "token": token}
        await self._call(lambda: self._q("lease_release", params), "lease_release")

    async def lease_list(self) -> list[Lease]:
        rows = await self._call(lambda: self._q("lease_list"), "lease_list")
        return [Lease(int(s), o, int(t), bool(live)) for s, o, t, live in rows]

    async def backlog(self, shard_count: int) -> Backlog:
        rows = await self._call(
            lambda: self._q("outbox_backlog", {"shard_count": shard_count}), "outbox_backlog"
        )
        pending, parked, oldest = rows[0]
        return Backlog(int(pending), int(parked), float(oldest or 0.0))

    async def replica_heartbeat(self, owner: str, ttl_s: float) -> None:
        params = {"owner": owner, "ttl_s": f"{ttl_s:.3f}"}
        await self._call(lambda: self._q("replica_heartbeat", params), "replica_heartbeat")

    async def replica_list_live(self) -> list[str]:
        return [
            str(r[0])
            for r in await self._call(lambda: self._q("replica_list_live"), "replica_list_live")
        ]

    async def replica_remove(self, owner: str) -> None:
        await self._call(lambda: self._q("replica_remove", {"owner": owner}), "replica_remove")

    async def purge(self, retention_s: float, idempotency_retention_s: float, limit: int) -> int:
        def body() -> int:
            db = self._db()
            removed = db.execute(
                query("sqlite", "outbox_purge_published"),
                {"retention_s": f"{retention_s:.3f}", "limit": limit},
            ).rowcount
            removed += db.execute(
                query("sqlite", "idempotency_purge"),
                {"retention_s": f"{idempotency_retention_s:.3f}", "limit": limit},
            ).rowcount
            db.execute(query("sqlite", "replica_purge_dead"))
            return removed

        return await self._call(lambda: self._in_write_tx(body), "purge")
