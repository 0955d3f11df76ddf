"""The Outbox: emit events inside the caller's transaction."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from outbox_core.errors import UniqueViolation
from outbox_core.executors import run_plan, run_plan_async
from outbox_core.migrate import DEFAULT_SHARD_COUNT
from outbox_core.sharding import DEFAULT_LOCK_NAMESPACE, MAX_SHARDS, shard_for
from producer_lib.emitter import emits, emits_async
from producer_lib.errors import ConfigurationError, DuplicateEventId
from producer_lib.events import MAX_IDEMPOTENCY_KEY_CHARS, Event, EventRow, prepare
from producer_lib.plans import WriteOptions, database_shard_count, emit_many, emit_one
from producer_lib.serialization import JsonSerializer, Serializer
from producer_lib.transactions import async_executor, sync_executor

# aiokafka's default max_request_size is 1,048,576 bytes; leave room for the record
# batch framing so an accepted event is never too large for the relay's producer.
DEFAULT_MAX_EVENT_BYTES = 1_000_000
# The unique constraint on outbox_events.event_id, as Postgres and SQLite name it.
_EVENT_ID_UNIQUE = ("outbox_events_event_id_key", "outbox_events.event_id")
_CHANNEL = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class Outbox:
    """Writes events into outbox_events on the caller's connection, never committing.

    shard_count is the database's (outbox_settings, read on the first emit): leave it
    out. Given, it must equal the database's (checked once per Outbox: ShardCountMismatch).
    Either way it is read once, so one Outbox serves one outbox database.
    per_key_lock makes events of one (topic, key) commit in id order by taking a lock at
    emit, held to commit (Postgres: a transaction-scoped advisory lock; MariaDB: the key's
    row of outbox_key_locks): writers of the same key queue behind each other until
    commit. Turn it off only when one writer per key is guaranteed otherwise.
    notify_channel (Postgres) adds a NOTIFY hint for relays run with listen_notify: one
    per transaction and shard, folded by Postgres. It is off by default: NOTIFY takes a
    global lock at commit, which costs throughput under many concurrent writers.
    """

    def __init__(
        self,
        *,
        shard_count: int | None = None,
        serializer: Serializer | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        per_key_lock: bool = True,
        idempotency_scope: str = "default",
        lock_namespace: int = DEFAULT_LOCK_NAMESPACE,
        notify_channel: str | None = None,
    ) -> None:
        if shard_count is not None and (
            not isinstance(shard_count, int)
            or isinstance(shard_count, bool)
            or not 1 <= shard_count <= MAX_SHARDS
        ):
            raise ConfigurationError(f"shard_count must be an int in 1..{MAX_SHARDS}")
        if not isinstance(max_event_bytes, int) or max_event_bytes < 1024:
            raise ConfigurationError("max_event_bytes must be an int of at least 1024")
        if (
            not isinstance(idempotency_scope, str)
            or not 1 <= len(idempotency_scope) <= MAX_IDEMPOTENCY_KEY_CHARS
        ):
            raise ConfigurationError(
                f"idempotency_scope must be a str of 1-{MAX_IDEMPOTENCY_KEY_CHARS} characters"
            )
        if not -(2**31) <= lock_namespace < 2**31:
            raise ConfigurationError("lock_namespace must fit a signed 32-bit int")
        if notify_channel is not None and not _CHANNEL.match(notify_channel):
            raise ConfigurationError("notify_channel must be a lowercase SQL identifier")
        self.serializer: Serializer = serializer or JsonSerializer()
        self.max_event_bytes = max_event_bytes
        self._opts = WriteOptions(
            scope=idempotency_scope,
            per_key_lock=per_key_lock,
            lock_namespace=lock_namespace,
            shard_count=shard_count or 0,
            check_shard_count=True,
            notify_channel=notify_channel,
        )

    @property
    def shard_count(self) -> int | None:
        """The shard_count given, or the database's once an emit has read it; else None."""
        return self._opts.shard_count or None

    def prepare(self, event: Event) -> EventRow:
        """Validate and serialize without writing: the checks every emit runs first.
        Until the database's shard_count is known, the row's shard is the default's."""
        return self._prepare(event, self._opts)

    def _prepare(self, event: Event, opts: WriteOptions) -> EventRow:
        return prepare(
            event,
            serializer=self.serializer,
            shard_count=opts.shard_count or DEFAULT_SHARD_COUNT,
            max_event_bytes=self.max_event_bytes,
        )

    def _learn(self, recorded: int, rows: list[EventRow]) -> tuple[WriteOptions, list[EventRow]]:
        """The database's shard_count is now known: the options with it, and the rows
        sharded by it. The options are replaced in one assignment and every emit reads
        them once, so threads sharing this Outbox see the old options or the new, never
        a shard_count from one and a check from the other."""
        opts = replace(self._opts, shard_count=recorded, check_shard_count=False)
        self._opts = opts
        return opts, [replace(r, shard=shard_for(r.key, recorded)) for r in rows]

    def _checked(self) -> None:
        # The database's shard_count cannot change under a running producer.
        if self._opts.check_shard_count:
            self._opts = replace(self._opts, check_shard_count=False)

    @emits
    def emit(self, conn: Any, event: Event) -> uuid.UUID:
        """Write one event in conn's transaction; returns its event_id.

        With an idempotency_key already used for the same body, returns the first
        event's id and writes nothing; for a different body raises IdempotencyConflict.
        tenant (optional, 1-255 characters) names whose event it is: a relay run with
        fair_tenants takes turns between tenants, so one tenant's flood does not delay
        the others. A key should belong to one tenant.
        """
        opts = self._opts
        row = self._prepare(event, opts)
        executor = sync_executor(conn)
        if not opts.shard_count:
            opts, [row] = self._learn(run_plan(database_shard_count(), executor), [row])
        with _duplicates_named():
            result: uuid.UUID = run_plan(emit_one(row, executor.dialect, opts), executor)
        self._checked()
        return result

    def emit_batch(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        """Write many events in one statement (per event when idempotency keys are used)."""
        opts = self._opts
        rows = [self._prepare(e, opts) for e in events]
        executor = sync_executor(conn)
        if not opts.shard_count and rows:
            opts, rows = self._learn(run_plan(database_shard_count(), executor), rows)
        with _duplicates_named():
            result: list[uuid.UUID] = run_plan(emit_many(rows, executor.dialect, opts), executor)
        self._checked()
        return result

    @emits_async
    async def emit_async(self, conn: Any, event: Event) -> uuid.UUID:
        """emit for AsyncSession, AsyncConnection and psycopg AsyncConnection."""
        opts = self._opts
        row = self._prepare(event, opts)
        executor = await async_executor(conn)
        if not opts.shard_count:
            recorded = await run_plan_async(database_shard_count(), executor)
            opts, [row] = self._learn(recorded, [row])
        with _duplicates_named():
            result: uuid.UUID = await run_plan_async(
                emit_one(row, executor.dialect, opts), executor
            )
        self._checked()
        return result

    async def emit_batch_async(self, conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
        opts = self._opts
        rows = [self._prepare(e, opts) for e in events]
        executor = await async_executor(conn)
        if not opts.shard_count and rows:
            recorded = await run_plan_async(database_shard_count(), executor)
            opts, rows = self._learn(recorded, rows)
        with _duplicates_named():
            result: list[uuid.UUID] = await run_plan_async(
                emit_many(rows, executor.dialect, opts), executor
            )
        self._checked()
        return result


@contextlib.contextmanager
def _duplicates_named() -> Iterator[None]:
    """A unique violation on outbox_events.event_id is the caller's input, not the
    database's failure: it is an InvalidEvent (DuplicateEventId)."""
    try:
        yield
    except UniqueViolation as exc:
        if exc.constraint not in _EVENT_ID_UNIQUE:
            raise
        raise DuplicateEventId() from exc
