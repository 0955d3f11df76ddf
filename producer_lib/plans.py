"""What emit does, as plans of named statements, independent of driver and of sync/async.

A plan (outbox_core.executors.Plan) yields Statements, receives the rows each returned,
and finally returns its result; the executor of the caller's connection runs it
(transactions.py), so the same plan serves sync and async code and every dialect.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from outbox_core.codec import codec_for
from outbox_core.database_url import Dialect
from outbox_core.executors import Plan, Statement
from outbox_core.sharding import KEY_LOCK_SLOTS, key_lock_slot, lock_key
from producer_lib.errors import ConfigurationError, MigrationError, ShardCountMismatch
from producer_lib.events import EventRow
from producer_lib.idempotency import reused


@dataclass(frozen=True)
class WriteOptions:
    scope: str
    per_key_lock: bool
    lock_namespace: int
    shard_count: int  # 0 until the database's is known
    check_shard_count: bool
    notify_channel: str | None = None


def row_params(row: EventRow, dialect: Dialect, opts: WriteOptions) -> dict[str, Any]:
    codec = codec_for(dialect)
    params: dict[str, Any] = {
        "event_id": codec.uuid(row.event_id),
        "topic": row.topic,
        "key": row.key,
        "shard": row.shard,
        "event_type": row.event_type,
        "payload": row.payload,
        "headers": row.headers_json,
        "available_at": codec.time(row.available_at),
        "delay_s": codec.seconds(row.delay_s),
        "tenant": row.tenant,
    }
    # SQLite has one writer at a time: no lock, no hint. MariaDB locks in a statement of
    # its own (lock_keys).
    if dialect == "postgres":
        params["lock_ns"] = opts.lock_namespace
        params["lock_key"] = lock_key(row.topic, row.key) if opts.per_key_lock else None
        params["notify_channel"] = opts.notify_channel
    return params


def database_shard_count() -> Plan:
    """The shard_count the database records: the one producers and relays share."""
    rows = yield Statement("setting_get", {"name": "shard_count"})
    if not rows:
        raise ConfigurationError(
            "outbox_settings has no shard_count: run the migrations (outbox-relay migrate)"
        )
    return int(rows[0][0])


def check_shard_count(opts: WriteOptions) -> Plan:
    recorded = yield from database_shard_count()
    if recorded != opts.shard_count:
        raise ShardCountMismatch(opts.shard_count, recorded)


def emit_one(row: EventRow, dialect: Dialect, opts: WriteOptions) -> Plan:
    """Insert one event; with an idempotency key, return the existing event_id instead."""
    if opts.check_shard_count:
        yield from check_shard_count(opts)
    if row.idempotency_key is not None:
        key_params = {"scope": opts.scope, "idempotency_key": row.idempotency_key}
        inserted = yield Statement(
            "idempotency_insert",
            {
                **key_params,
                "body_hash": row.body_hash,
                "event_id": codec_for(dialect).uuid(row.event_id),
            },
        )
        if not inserted:
            # Another transaction holds the key and has committed (Postgres waited for it).
            existing = yield Statement("idempotency_get", key_params)
            stored_hash, stored_id = existing[0]
            return reused(row, stored_hash, stored_id)
    if dialect == "mariadb" and opts.per_key_lock:
        yield from lock_keys([row])
    yield Statement(_insert_query(dialect, opts), row_params(row, dialect, opts))
    return row.event_id


def lock_keys(rows: Sequence[EventRow]) -> Plan:
    """MariaDB: lock the rows' slots of outbox_key_locks, in ascending order, until the
    caller's transaction ends, so that writers of one key draw their AUTO_INCREMENT ids in
    commit order (docs/decisions/0027-mariadb-per-key-order.md). A statement of its own,
    before the insert: an INSERT ... SELECT that waited for the lock would hold the
    table's AUTO_INCREMENT lock while it waited, and every writer would queue behind it."""
    slots = sorted({key_lock_slot(r.topic, r.key) for r in rows})
    locked = yield Statement("outbox_key_locks_take", {"slots": codec_for("mariadb").array(slots)})
    if len(locked) != len(slots):
        # Without its row a key would go unlocked, and its order unguarded, silently.
        raise MigrationError(
            f"outbox_key_locks lacks some of its {KEY_LOCK_SLOTS} slots: run the migrations "
            "(outbox-relay migrate)"
        )


def _insert_query(dialect: Dialect, opts: WriteOptions) -> str:
    if dialect == "postgres" and (opts.per_key_lock or opts.notify_channel):
        return "outbox_insert_locked"
    return "outbox_insert"


def emit_many(rows: Sequence[EventRow], dialect: Dialect, opts: WriteOptions) -> Plan:
    """Insert many events; one statement unless an event carries an idempotency key."""
    if not rows:
        return []
    if any(r.idempotency_key is not None for r in rows):
        # Each keyed event may resolve to an existing one; keep the caller's order.
        results: list[uuid.UUID] = []
        for i, row in enumerate(rows):
            one_opts = opts if i == 0 else replace(opts, check_shard_count=False)
            results.append((yield from emit_one(row, dialect, one_opts)))
        return results
    if opts.check_shard_count:
        yield from check_shard_count(opts)
    if dialect != "postgres":
        # No array parameters: the one-event insert, run per event (sqlite3 in process;
        # the MySQL drivers fold the runs into one multi-row INSERT, its ids in the caller's
        # order).
        if dialect == "mariadb" and opts.per_key_lock:
            yield from lock_keys(rows)
        yield Statement("outbox_insert", [row_params(r, dialect, opts) for r in rows], many=True)
        return [r.event_id for r in rows]
    yield Statement(
        "outbox_insert_batch",
        {
            "lock_ns": opts.lock_namespace,
            "lock_keys": [lock_key(r.topic, r.key) for r in rows] if opts.per_key_lock else [],
            "event_ids": [r.event_id for r in rows],
            "topics": [r.topic for r in rows],
            "keys": [r.key for r in rows],
            "shards": [r.shard for r in rows],
            "event_types": [r.event_type for r in rows],
            "payloads": [r.payload for r in rows],
            "headers": [r.headers_json for r in rows],
            "available_ats": [r.available_at for r in rows],
            "delays_s": [r.delay_s for r in rows],
            "tenants": [r.tenant for r in rows],
            "notify_channel": opts.notify_channel,
        },
    )
    return [r.event_id for r in rows]
