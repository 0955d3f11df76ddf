"""Store on Postgres: psycopg 3 async connections from a small pool, autocommit.

Every state change is one statement (see outbox_settle_* in producer_lib/sql), so no
transaction is ever left open across an await on Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from producer_lib.queries import Dialect, query
from relay.errors import LeaseLost, StoreUnavailable
from relay.pg_pool import reconnecting_pool
from relay.store import AppliedMigration, Backlog, ClaimedRow, Failure, Lease, Policy, Settled

Rows = list[tuple[Any, ...]]


class PostgresStore:
    dialect: Dialect = "postgres"

    def __init__(self, url: str, *, max_connections: int = 8) -> None:
        self._url = url
        self._pool = self._make_pool(url, max_connections)
        # Leases, membership and gauges have their own connections: when claims are slow
        # they must not queue behind the shard workers, or every lease expires at once.
        self._control = self._make_pool(url, 2)

    @staticmethod
    def _make_pool(url: str, size: int) -> AsyncConnectionPool[Any]:
        return reconnecting_pool(
            url,
            max_size=size,
            timeout=30,
            kwargs={"autocommit": True},
            # A restarted server leaves dead connections in the pool; check before use (one
            # round trip per batch or heartbeat, not per event).
            check=AsyncConnectionPool.check_connection,
        )

    async def open(self) -> None:
        try:
            await self._pool.open(wait=True, timeout=30)
            await self._control.open(wait=True, timeout=30)
        except Exception as exc:
            raise StoreUnavailable(f"cannot connect to Postgres: {_describe(exc)}") from exc

    async def close(self) -> None:
        await self._pool.close()
        await self._control.close()

    async def _run(self, name: str, params: Mapping[str, Any], *, control: bool = False) -> Rows:
        pool = self._control if control else self._pool
        try:
            # Control calls fail fast while the server is away, so a heartbeat round
            # reports it within seconds instead of queueing past the lease.
            async with pool.connection(timeout=5 if control else 30) as conn:
                cur = await conn.execute(query("postgres", name), params)
                return list(await cur.fetchall()) if cur.description else []
        except Exception as exc:  # driver, network and pool (timeout) errors alike
            raise StoreUnavailable(f"{name}: {_describe(exc)}") from exc

    async def migrations(self) -> list[AppliedMigration]:
        try:
            rows = await self._run("migration_list", {})
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
                return []
            raise
        return [AppliedMigration(int(v), str(n), str(c)) for v, n, c in rows]

    async def shard_count(self) -> int:
        rows = await self._run("setting_get", {"name": "shard_count"})
        return int(rows[0][0]) if rows else 0

    async def max_pending_shard(self) -> int:
        return int((await self._run("outbox_shard_max", {}))[0][0])

    async def claim(self, shard: int, limit: int, policy: Policy) -> list[ClaimedRow]:
        name = "outbox_claim_batch" if policy == "block_key" else "outbox_claim_batch_skip"
        rows = await self._run(name, {"shard": shard, "limit": limit})
        return [ClaimedRow._make(r) for r in rows]

    async def settle(
        self,
        shard: int,
        owner: str,
        token: int,
        published_ids: Sequence[int],
        failures: Sequence[Failure],
        keep: bool,
    ) -> Settled:
        rows = await self._run(
            "outbox_settle_keep" if keep else "outbox_settle_delete",
            {
                "shard": shard,
                "owner": owner,
                "token": token,
                "published_ids": list(published_ids),
                "failed_ids": [f.id for f in failures],
                "errors": [f.error for f in failures],
                "delays_s": [f.delay_s for f in failures],
                "parks": [f.park for f in failures],
            },
        )
        held, published, failed = rows[0]
        if not held:
            raise LeaseLost(shard)
        return Settled(int(published), int(failed))

    async def lease_acquire(self, shard: int, owner: str, ttl_s: float) -> int | None:
        rows = await self._run(
            "lease_acquire", {"shard": shard, "owner": owner, "ttl_s": ttl_s}, control=True
        )
        return int(rows[0][0]) if rows else None

    async def lease_renew(self, owner: str, held: Mapping[int, int], ttl_s: float) -> set[int]:
        if not held:
            return set()
        rows = await self._run(
            "lease_renew",
            {"owner": owner, "shards": list(held), "tokens": list(held.values()), "ttl_s": ttl_s},
            control=True,
        )
        return {int(r[0]) for r in rows}

    async def lease_release(self, shard: int, owner: str, token: int) -> None:
        await self._run(
            "lease_release", {"shard": shard, "owner": owner, "token": token}, control=True
        )

    async def lease_list(self) -> list[Lease]:
        return [
            Lease(int(s), o, int(t), bool(live))
            for s, o, t, live in await self._run("lease_list", {}, control=True)
        ]

    async def backlog(self, shard_count: int) -> Backlog:
        pending, parked, oldest = (
            await self._run("outbox_backlog", {"shard_count": shard_count}, control=True)
        )[0]
        return Backlog(int(pending), int(parked), float(oldest or 0.0))

    async def replica_heartbeat(self, owner: str, ttl_s: float) -> None:
        await self._run("replica_heartbeat", {"owner": owner, "ttl_s": ttl_s}, control=True)

    async def replica_list_live(self) -> list[str]:
        return [str(r[0]) for r in await self._run("replica_list_live", {}, control=True)]

    async def replica_remove(self, owner: str) -> None:
        await self._run("replica_remove", {"owner": owner}, control=True)

    async def purge(self, retention_s: float, idempotency_retention_s: float, limit: int) -> int:
        removed = 0
        try:
            async with self._control.connection(timeout=30) as conn:
                cur = await conn.execute(
                    query("postgres", "outbox_purge_published"),
                    {"retention_s": retention_s, "limit": limit},
                )
                removed += int(cur.rowcount)
                cur = await conn.execute(
                    query("postgres", "idempotency_purge"),
                    {"retention_s": idempotency_retention_s, "limit": limit},
                )
                removed += int(cur.rowcount)
                await conn.execute(query("postgres", "replica_purge_dead"), {})
        except Exception as exc:  # the pool's own errors (timeouts) too
            raise StoreUnavailable(f"purge: {_describe(exc)}") from exc
        return removed


def _describe(exc: BaseException) -> str:
    # psycopg messages never include the password; keep only the first line.
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
