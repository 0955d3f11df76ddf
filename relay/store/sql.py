"""The Store on SQL: one implementation over an executor and a codec, for every dialect
(built from the settings by relay/database.py).

What differs per dialect is only how connections are held (an asyncpg pool in autocommit,
one SQLite connection on its own thread, or a MariaDB pool: outbox_core.asyncpg_pool /
sqlite_thread / mariadb_pool), how parameters are encoded (outbox_core.codec), and the
forms of the claim, the settle and the lease writes: Postgres writes each as one
statement; SQLite claims shard by shard and settles in steps under its write lock;
MariaDB, without LATERAL or UPDATE ... RETURNING, claims the shards without a backlog in
one statement and the others with a part each (one UNION ALL), and settles and writes
leases in steps inside one transaction (CLAIM_FORMS, SETTLE_FORMS, WRITE_FORMS).
"""

from __future__ import annotations

import asyncio
import functools
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, get_args

from outbox_core.codec import codec_for
from outbox_core.database_url import DIALECT_NAMES, Dialect
from outbox_core.errors import DatabaseError, MigrationError, OutboxError, StartupParameterRefused
from outbox_core.executors import AsyncPool, NamedRows, Plan, Rows, Statement
from outbox_core.supervisor import pieces
from relay.errors import PoolerRefused, RelayError, StartupRefused, StoreUnavailable
from relay.store import (
    AppliedMigration,
    Backlog,
    Changed,
    ClaimedRow,
    ClaimRequest,
    HorizonHolder,
    Lease,
    ParkedRow,
    Policy,
    ReplayFilter,
    Rotated,
    Rotation,
    RowFilter,
    Settled,
    SettleRequest,
    TenantBacklog,
    TenantTurns,
    plans,
)
from relay.store.file_lock import RelayFileLock


def _settle_in_one_statement(fence: dict[str, Any], params: dict[str, Any], keep: bool) -> Plan:
    rows = yield Statement(
        "outbox_settle_keep" if keep else "outbox_settle_delete", {**fence, **params}
    )
    held, published, failed = rows[0]
    return Settled(int(published), int(failed), frozenset(fence["shards"]) - set(held))


def _held_shards(fence: dict[str, Any], dialect: Dialect) -> Plan:
    """The fence of a settle in steps: the shards whose lease row still carries our token,
    in one statement (lease_check, which on MariaDB also locks the rows until the settle
    commits). They go in ascending shard order, the order lease_renew's scan locks the
    rows in: in any other, a settle and its own relay's renewal could each hold a row the
    other waits for, and the deadlock's victim (the settle) has its batch sent again."""
    ordered = sorted(zip(fence["shards"], fence["tokens"], strict=True))
    c = codec_for(dialect)
    check = {
        "owner": fence["owner"],
        "shards": c.array([shard for shard, _ in ordered]),
        "tokens": c.array([token for _, token in ordered]),
    }
    return [int(shard) for (shard,) in (yield Statement("lease_check", check))]


def _settle_in_steps(fence: dict[str, Any], params: dict[str, Any], keep: bool) -> Plan:
    held = yield from _held_shards(fence, "sqlite")
    lost = frozenset(fence["shards"]) - set(held)
    if not held:
        return Settled(0, 0, lost)
    shards = {"shards": codec_for("sqlite").array(held)}
    published = yield Statement(
        "outbox_mark_published" if keep else "outbox_delete_published",
        {**shards, "published_ids": params["published_ids"]},
    )
    # SQLite marks kept rows where they are, whatever their size: no move_max_bytes.
    failures = {k: params[k] for k in ("failed_ids", "errors", "delays_s", "parks")}
    failed = yield Statement("outbox_record_failures", {**shards, **failures})
    return Settled(len(published), len(failed), lost)


_NO_IDS = codec_for("mariadb").ids([])
# (keep, failures): the settle's writes after its fence, on MariaDB.
_SETTLE_STEPS = {
    (True, False): "outbox_settle_keep_steps",
    (True, True): "outbox_settle_keep_failed_steps",
    (False, False): "outbox_settle_delete_steps",
    (False, True): "outbox_settle_delete_failed_steps",
}


def _settle_in_a_transaction(fence: dict[str, Any], params: dict[str, Any], keep: bool) -> Plan:
    """MariaDB: one transaction (SqlStore runs a plan that writes so), fenced by the lease
    rows lease_check locks in share mode, then the writes and their counts sent in one
    round trip with the COMMIT (outbox_settle_*_steps): two round trips, the first with
    the transaction's start. Kept rows move into outbox_published, copied then deleted;
    those larger than move_max_bytes are marked where they are. The failures' write is
    sent only when there are failures: a multi-table UPDATE that sets a TEXT column
    (last_error) from another table keeps the values in a temporary table on disk, even
    for no row."""
    held = yield from _held_shards(fence, "mariadb")
    lost = frozenset(fence["shards"]) - set(held)
    if not held:
        return Settled(0, 0, lost)
    failures = params["failed_ids"] != _NO_IDS
    counts = yield Statement(
        _SETTLE_STEPS[keep, failures],
        [{**params, "shards": codec_for("mariadb").array(held)}],
        together=True,
        commit=True,
    )
    found = [int(n) for (n,) in counts]
    published, failed = (found[:-1], found[-1]) if failures else (found, 0)
    return Settled(sum(published), failed, lost)


SettleForm = Callable[[dict[str, Any], dict[str, Any], bool], Plan]
SETTLE_FORMS: dict[Dialect, SettleForm] = {
    "postgres": _settle_in_one_statement,
    "sqlite": _settle_in_steps,
    "mariadb": _settle_in_a_transaction,
}


def _single_write(name: str, params: dict[str, Any]) -> Plan:
    return (yield Statement(name, params))


def _write_then_read(name: str, params: dict[str, Any]) -> Plan:
    """No UPDATE ... RETURNING: the write, then `<name>_result` reads what it wrote, in the
    same transaction (its locks held), which commits with it."""
    yield Statement(name, params)
    return (yield Statement(f"{name}_result", params, commit=True))


# A lease write that returns rows (lease_acquire, lease_renew).
WriteForm = Callable[[str, dict[str, Any]], Plan]
WRITE_FORMS: dict[Dialect, WriteForm] = {
    "postgres": _single_write,
    "sqlite": _single_write,
    "mariadb": _write_then_read,
}


def _claim_in_one_statement(name: str, shards: list[int], params: dict[str, Any]) -> Plan:
    # Binary rows: the claim is the relay's one large read (payloads as raw bytes).
    return (yield Statement(name, {"shards": shards, **params}, binary=True, named=True))


def _claim_per_shard(name: str, shards: list[int], params: dict[str, Any]) -> Plan:
    rows = NamedRows([], ClaimedRow._fields)
    for i, shard in enumerate(shards):
        # head: the first shard's first row goes whatever its size (the byte budget).
        found = yield Statement(name, {"shard": shard, "head": i == 0, **params}, named=True)
        assert isinstance(found, NamedRows)
        rows.columns = found.columns  # the same statement each time: the same columns
        rows += found
    return rows


def _claim_per_shard_union(name: str, shards: list[int], params: dict[str, Any]) -> Plan:
    """MariaDB: the statement of _claim_per_shard once per shard as the parts of one
    UNION ALL, for the shards that have unpublished rows (outbox_shards_unpublished). A
    plain claim sends that filter together with one statement for every shard without a
    backlog (outbox_claim_shards): at a steady flow a claim is one round trip, and only a
    shard with a backlog gets a part, in a second. The server plans and runs one claim
    statement, which sends one result set (decision 31). At READ COMMITTED a statement
    opens its read view at its first read and reads its clock (claim_clock: SYSDATE(6))
    as each row is read, after that, so "when a row is due" is judged as in a statement
    per shard (design.md); each shard's rows come from one statement, in id order. The
    first row of the rotation's first shard goes whatever its size (head)."""
    array = codec_for("mariadb").array(shards)
    params = {"head": shards[0], **params}
    at_once = CLAIMS_OF_SHARDS.get(name)
    if at_once is None:
        found = yield Statement("outbox_shards_unpublished", {"shards": array, **params})
        claimed = NamedRows([], ClaimedRow._fields)
    else:
        found = yield Statement(at_once, {"shards": array, **params}, named=True, sets=True)
        assert isinstance(found, NamedRows)
        (claimed,) = found.later
    # The shards with a backlog that the statement for the others left out (judged again
    # in its own read view: a shard it claimed from is not claimed twice).
    shard_at = claimed.columns.index("shard")
    taken = {row[shard_at] for row in claimed}
    backlog = [int(shard) for shard, many in found if many or at_once is None]
    backlog = [shard for shard in backlog if shard not in taken]
    if not backlog:
        return claimed
    each = [{"shard": shard, **params} for shard in backlog]
    rows = yield Statement(name, each, named=True, union=True)
    assert isinstance(rows, NamedRows)
    return NamedRows([*claimed, *rows], rows.columns)


# MariaDB: the plain claims with the claim of the shards without a backlog, in one round
# trip (outbox_claim_shards).
CLAIMS_OF_SHARDS = {
    "outbox_claim_batch": "outbox_claim_shards",
    "outbox_claim_batch_skip": "outbox_claim_shards_skip",
}


# (policy, shape): without fair_tenants the claim is the statement it always was (plain);
# a lane claiming for one tenant takes the same rows as the fair claim, the plain way.
ClaimShape = Literal["plain", "fair", "tenant"]
CLAIM_QUERIES: dict[tuple[Policy, ClaimShape], str] = {
    ("block_key", "plain"): "outbox_claim_batch",
    ("skip", "plain"): "outbox_claim_batch_skip",
    ("block_key", "fair"): "outbox_claim_batch_fair",
    ("skip", "fair"): "outbox_claim_batch_fair_skip",
    ("block_key", "tenant"): "outbox_claim_batch_tenant",
    ("skip", "tenant"): "outbox_claim_batch_tenant_skip",
}

ClaimForm = Callable[[str, list[int], dict[str, Any]], Plan]
CLAIM_FORMS: dict[Dialect, ClaimForm] = {
    "postgres": _claim_in_one_statement,
    "sqlite": _claim_per_shard,
    "mariadb": _claim_per_shard_union,
}


_new_claimed_row: Callable[[Sequence[Any]], ClaimedRow] = functools.partial(
    tuple.__new__, ClaimedRow
)


@functools.cache
def claimed_row_maker(columns: tuple[str, ...]) -> Callable[[Sequence[Any]], ClaimedRow]:
    """What turns a claim's row into a ClaimedRow, its fields read by column name; found
    once per column list. The claims return ClaimedRow's fields in its order, so a row is
    made without a Python-level call (NamedTuple._make is one): claims return thousands of
    rows a second. Any other order is read right too, at one call a row."""
    missing = [name for name in ClaimedRow._fields if name not in columns]
    if missing:
        # The .sql and ClaimedRow disagree: no retry can help.
        raise DatabaseError(
            f"the claim returns no column {', '.join(missing)} (it returns {columns})",
            retriable=False,
        )
    at = tuple(columns.index(name) for name in ClaimedRow._fields)
    if at == tuple(range(len(columns))):
        return _new_claimed_row
    pick = operator.itemgetter(*at)
    return lambda row: _new_claimed_row(pick(row))


# Which connections a statement runs on (relay/database.py says why there are three).
PoolRole = Literal["work", "control", "side"]
POOL_ROLES: tuple[PoolRole, ...] = get_args(PoolRole)


class SqlStore:
    """work: the connections the lanes claim and settle on; control: leases and
    membership; side: gauges, claim floors, horizon, purge and the operator's commands.
    On SQLite, which has one connection, the three are the same object."""

    def __init__(
        self,
        work: AsyncPool,
        control: AsyncPool | None = None,
        side: AsyncPool | None = None,
        *,
        file_lock: RelayFileLock | None = None,
        sqlite_path: str | None = None,
    ) -> None:
        self.dialect: Dialect = work.dialect
        self._pools: dict[PoolRole, AsyncPool] = {
            "work": work,
            "control": control or work,
            "side": side or control or work,
        }
        self._codec = codec_for(self.dialect)
        self._settle = SETTLE_FORMS[self.dialect]
        self._claim = CLAIM_FORMS[self.dialect]
        self._write = WRITE_FORMS[self.dialect]
        self._lock = file_lock
        self._sqlite_path = sqlite_path
        self._floors: Mapping[int, int] = {}

    # ---------------------------------------------------------------- plumbing

    async def _run(self, statement: Statement, *, pool: PoolRole = "work") -> Rows:
        try:
            return await self._pools[pool].run(statement)
        except RelayError:
            raise
        except OutboxError as exc:
            raise _unavailable(statement.query, exc) from exc

    async def _plan(
        self, what: str, plan: Plan, *, pool: PoolRole = "work", write: bool = True
    ) -> Any:
        try:
            return await self._pools[pool].run_plan(plan, write=write)
        except RelayError:
            raise
        except OutboxError as exc:
            raise _unavailable(what, exc) from exc

    def _distinct_pools(self) -> list[AsyncPool]:
        return list({id(p): p for p in self._pools.values()}.values())

    async def open(self) -> None:
        if self._sqlite_path is not None and not await asyncio.to_thread(
            os.path.exists, self._sqlite_path
        ):
            raise StartupRefused(
                f"SQLite database {self._sqlite_path} does not exist: run migrate first"
            )
        if self._lock is not None:
            await self._lock.acquire()
        try:
            for pool in self._distinct_pools():
                await pool.open()
        except StartupParameterRefused as exc:
            raise PoolerRefused(exc) from exc
        except OutboxError as exc:
            raise _unavailable(f"cannot connect to {DIALECT_NAMES[self.dialect]}", exc) from exc

    async def close(self) -> None:
        for pool in self._distinct_pools():
            await pool.close()
        if self._lock is not None:
            self._lock.release()

    # ---------------------------------------------------------------- reads

    async def migrations(self) -> list[AppliedMigration]:
        try:
            rows = await self._run(Statement("migration_list"))
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, MigrationError):  # no migration table yet
                return []
            raise
        return [AppliedMigration(int(v), str(n), str(c)) for v, n, c in rows]

    async def shard_count(self) -> int:
        count: int = await self._plan("setting_get", plans.shard_count(), write=False)
        return count

    async def max_pending_shard(self) -> int:
        return int((await self._run(Statement("outbox_shard_max")))[0][0])

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        shards, limit, turns = request.shards, request.limit, request.turns
        if not shards:
            return []
        floors = self._floors
        params = {
            "limit": limit,
            "in_flight": self._codec.ids(request.in_flight),
            "shard_bytes": request.shard_bytes,
            "held_keys": self._codec.array(list(request.held_keys)),
            # Postgres only
            "floors": self._codec.array([floors.get(shard, 0) for shard in shards]),
        }
        shape: ClaimShape = "plain"
        if turns is not None:
            cap = limit if turns.max_rows is None else min(turns.max_rows, limit)
            if turns.lone is not None:
                shape = "tenant"
                params.update(limit=cap, tenant=turns.lone)
            else:
                shape = "fair"
                params.update(self._turns(turns, cap))
        name = CLAIM_QUERIES[request.policy, shape]
        rows: NamedRows = await self._plan(
            name, self._claim(name, list(shards), params), write=False
        )
        make = claimed_row_maker(rows.columns)
        claimed: list[ClaimedRow] = []
        async for _, piece in pieces(rows):  # a large claim gives the other lane turns
            claimed += map(make, piece)
        return claimed

    def _turns(self, turns: TenantTurns, cap: int) -> dict[str, Any]:
        return {
            "per_tenant": cap,
            "weight_tenants": self._codec.array(list(turns.weights)),
            "weights": self._codec.array(list(turns.weights.values())),
            "only": self._codec.array(None if turns.only is None else sorted(turns.only)),
            "skip": self._codec.array(sorted(turns.skip)),
        }

    def set_claim_floors(self, floors: Mapping[int, int]) -> None:
        self._floors = dict(floors)

    async def floor_last_id(self) -> int | None:
        if self.dialect != "postgres":
            return None
        rows = await self._run(Statement("outbox_floor_mark", named=True), pool="side")
        mark = _by_name(rows)[0]
        if mark["last_id"] is None or int(mark["cache"]) != 1:
            return None
        return int(mark["last_id"])

    async def floor_writers(self) -> tuple[str, ...]:
        found = await self._run(Statement("outbox_floor_writers"), pool="side")
        return tuple(found[0][0])

    async def floor_writers_left(self, writers: Sequence[str]) -> int:
        if not writers:
            return 0
        rows = await self._run(
            Statement("outbox_floor_writers_left", {"writers": list(writers)}), pool="side"
        )
        return int(rows[0][0])

    async def floor_lowest(self, floors: Mapping[int, int]) -> dict[int, int | None]:
        params = {"shards": list(floors), "floors": list(floors.values())}
        rows = await self._run(Statement("outbox_floor_lowest", params), pool="side")
        return {int(s): None if low is None else int(low) for s, low in rows}

    async def floor_unpublished_between(
        self, low: int, high: Mapping[int, int]
    ) -> dict[int, int | None]:
        params = {"shards": list(high), "low": low, "high": list(high.values())}
        rows = await self._run(Statement("outbox_floor_rescan", params), pool="side")
        return {int(s): None if found is None else int(found) for s, found in rows}

    async def horizon(self) -> list[HorizonHolder]:
        if self.dialect != "postgres":
            return []
        rows = await self._run(Statement("database_horizon", named=True), pool="side")
        return [HorizonHolder.from_row(r) for r in _by_name(rows)]

    async def backlog(self, shard_count: int, count_limit: int) -> Backlog:
        plan = plans.backlog(self._codec, shard_count, self._floors, count_limit)
        found: Backlog = await self._plan("outbox_backlog", plan, pool="side", write=False)
        return found

    async def backlog_by_tenant(
        self, top: int, shard_count: int, count_limit: int
    ) -> list[TenantBacklog]:
        plan = plans.backlog_by_tenant(self._codec, top, shard_count, self._floors, count_limit)
        found: list[TenantBacklog] = await self._plan(
            "outbox_backlog_by_tenant", plan, pool="side", write=False
        )
        return found

    async def lease_list(self) -> list[Lease]:
        leases: list[Lease] = await self._plan(
            "lease_list", plans.lease_list(), pool="control", write=False
        )
        return leases

    async def replica_list_live(self) -> list[str]:
        live: list[str] = await self._plan(
            "replica_list_live", plans.replica_list_live(), pool="control", write=False
        )
        return live

    async def replica_roster(self) -> list[tuple[str, bool]]:
        rows = await self._run(Statement("replica_roster"), pool="control")
        return [(str(r[0]), bool(r[1])) for r in rows]

    # ---------------------------------------------------------------- writes

    async def settle(self, request: SettleRequest) -> Settled:
        failures = request.failures
        c = self._codec
        params = {
            "published_ids": c.ids(request.published_ids),
            "failed_ids": c.ids([f.id for f in failures]),
            "errors": c.array([f.error for f in failures]),
            "delays_s": c.array([f.delay_s for f in failures]),
            "parks": c.array([f.park for f in failures]),
        }
        tokens = request.tokens
        fence = {"owner": request.owner, "shards": list(tokens), "tokens": list(tokens.values())}
        if request.keep:
            params["move_max_bytes"] = request.move_max_bytes
        settled: Settled = await self._plan("settle", self._settle(fence, params, request.keep))
        return settled

    async def lease_acquire(self, shard: int, owner: str, ttl_s: float) -> int | None:
        params = {"shard": shard, "owner": owner, "ttl_s": self._codec.seconds(ttl_s)}
        rows: Rows = await self._plan(
            "lease_acquire", self._write("lease_acquire", params), pool="control"
        )
        return int(rows[0][0]) if rows else None

    async def lease_renew(self, owner: str, held: Mapping[int, int], ttl_s: float) -> set[int]:
        if not held:
            return set()
        c = self._codec
        ordered = sorted(held.items())  # ascending, as a settle's fence locks them
        params = {
            "owner": owner,
            "shards": c.array([shard for shard, _ in ordered]),
            "tokens": c.array([token for _, token in ordered]),
            "ttl_s": c.seconds(ttl_s),
        }
        rows: Rows = await self._plan(
            "lease_renew", self._write("lease_renew", params), pool="control"
        )
        return {int(r[0]) for r in rows}

    async def lease_release(self, shard: int, owner: str, token: int) -> None:
        params = {"shard": shard, "owner": owner, "token": token}
        await self._run(Statement("lease_release", params), pool="control")

    async def replica_heartbeat(self, owner: str, ttl_s: float) -> None:
        params = {"owner": owner, "ttl_s": self._codec.seconds(ttl_s)}
        await self._run(Statement("replica_heartbeat", params), pool="control")

    async def replica_remove(self, owner: str) -> None:
        await self._run(Statement("replica_remove", {"owner": owner}), pool="control")

    async def purge(self, retention_s: float, idempotency_retention_s: float, limit: int) -> int:
        c = self._codec

        def plan() -> Plan:
            published = yield Statement(
                "outbox_purge_published", {"retention_s": c.seconds(retention_s), "limit": limit}
            )
            keys = yield Statement(
                "idempotency_purge",
                {"retention_s": c.seconds(idempotency_retention_s), "limit": limit},
            )
            history = yield Statement(
                "outbox_published_purge",
                {"retention_s": c.seconds(retention_s), "limit": limit},
            )
            yield Statement("replica_purge_dead")
            return len(published) + len(history) + len(keys)

        removed: int = await self._plan("purge", plan(), pool="side")
        return removed

    async def rotate_published(self, rotation: Rotation) -> Rotated:
        params = {
            "retention_s": self._codec.seconds(rotation.retention_s),
            "width_s": rotation.width_s,
            "ahead_s": rotation.ahead_s,
            "lock_timeout_ms": rotation.lock_timeout_ms,
        }
        rows: Rows = await self._plan(
            "rotate", _single_write("outbox_published_rotate", params), pool="side"
        )
        created, dropped, skipped = rows[0]
        return Rotated(int(created), int(dropped), int(skipped))

    # ---------------------------------------------------------------- operator actions

    async def parked_list(self, rows: RowFilter) -> list[ParkedRow]:
        plan = plans.parked_list(self._codec, rows)
        found: list[ParkedRow] = await self._plan(
            "outbox_parked_list", plan, pool="side", write=False
        )
        return found

    async def parked_retry(self, ids: Sequence[int]) -> Changed:
        plan = plans.parked_act(self._codec, "retry", ids)
        return await self._change("outbox_parked_retry", plan)

    async def parked_discard(self, ids: Sequence[int]) -> Changed:
        plan = plans.parked_act(self._codec, "discard", ids)
        return await self._change("outbox_parked_discard", plan)

    async def replay_list(self, rows: ReplayFilter) -> list[int]:
        plan = plans.replay_list(self._codec, rows)
        found: list[int] = await self._plan("outbox_replay_list", plan, pool="side", write=False)
        return found

    async def replay(self, ids: Sequence[int]) -> Changed:
        return await self._change("outbox_replay", plans.replay(self._codec, ids))

    async def _change(self, what: str, plan: Plan) -> Changed:
        changed: Changed = await self._plan(what, plan, pool="side")
        return changed


def _by_name(rows: Rows) -> list[dict[str, Any]]:
    assert isinstance(rows, NamedRows)
    return [dict(zip(rows.columns, row, strict=True)) for row in rows]


def _unavailable(what: str, exc: OutboxError) -> StoreUnavailable:
    # Driver messages never include the password; keep only the first line.
    lines = str(exc).strip().splitlines()
    return StoreUnavailable(f"{what}: {lines[0] if lines else type(exc).__name__}")
