"""What one transaction applies: the events in partition order, the handler of each, and
the dedup statement that records their event_ids together.

Every adapter runs a Work the same way: in one transaction, run `dedup()` (when there is
one; on MariaDB again after a duplicate key, see `dedup_again`), hand its rows to
`calls()`, make those calls in order with its session, commit. A
Work of one event is the per-record path; a Work of many is a batch. Each handler call runs
in the CONSUMER span of its event (consumer_lib.tracing); a bulk call in its first event's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from consumer_lib.event import ConsumedEvent
from consumer_lib.tracing import process_span, tracing
from outbox_core.codec import codec_for
from outbox_core.database_url import Dialect
from outbox_core.errors import UniqueViolation
from outbox_core.executors import AsyncExecutor, Rows, Statement, SyncExecutor
from outbox_core.logs import trace_scope

# handler(event, session) -> None or awaitable; a bulk handler takes a list of events.
Handler = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Job:
    """One event and its handler. event_id None: run without dedup."""

    event_id: str | None
    event: Any
    call: Handler
    bulk: bool = False  # the handler takes a list of events (on_batch)


@dataclass(frozen=True)
class Call:
    handler: Handler
    argument: Any  # the event, or (bulk) the list of consecutive events for that handler
    first: Any  # the (first) event: whose trace context the call's span continues


class Work:
    def __init__(self, group: str, jobs: Sequence[Job]) -> None:
        self.group = group
        self.jobs = list(jobs)
        # Per job, once calls() ran: True applied now, False applied before (a duplicate).
        self.applied: list[bool] = []

    def dedup(self, dialect: Dialect) -> Statement | None:
        """Records every event_id of the work in one statement; its rows are the event_ids
        recorded now. None when no job has an event_id."""
        ids = [job.event_id for job in self.jobs if job.event_id is not None]
        if not ids:
            return None
        params = {"consumer_group": self.group, "event_ids": codec_for(dialect).array(ids)}
        return Statement("processed_event_insert_batch", params)

    def dedup_again(self, dialect: Dialect, failures: int) -> bool:
        """Whether to run the dedup statement again in the same transaction after it failed
        on a duplicate key `failures` times.

        Only MariaDB's can (at READ COMMITTED: it skips the rows committed when it began, and
        a concurrent transaction's row committed after that fails the insert; ON CONFLICT
        waits for that outcome instead). Only the statement rolled back, and the next run
        skips the row. Each failure is an id that became visible, so more failures than
        ids mean a duplicate the statement cannot see (an id the key stores differently),
        which is the record's failure.
        """
        return dialect == "mariadb" and failures <= len(self.jobs)

    def calls(self, recorded: Rows) -> list[Call]:
        """The handler calls to make, in order: one per event recorded now (an event_id
        twice in the work runs once, the first time), consecutive events of one bulk
        handler together."""
        fresh = {str(row[0]) for row in recorded}
        calls: list[Call] = []
        self.applied = []
        for job in self.jobs:
            run = job.event_id is None or job.event_id in fresh
            if job.event_id is not None:
                fresh.discard(job.event_id)
            self.applied.append(run)
            if not run:
                continue
            last = calls[-1] if calls else None
            if job.bulk and last is not None and last.handler is job.call:
                last.argument.append(job.event)
            else:
                argument = [job.event] if job.bulk else job.event
                calls.append(Call(job.call, argument, job.event))
        return calls


_UNTRACED = contextlib.nullcontext()


def _span(call: Call, group: str, traced: bool) -> contextlib.AbstractContextManager[Any]:
    if isinstance(call.first, ConsumedEvent):
        if traced:
            return process_span(call.first, group)
        # Without an SDK the handler's JSON log lines still name the producer's trace.
        traceparent = call.first.headers.get("traceparent")
        if traceparent:
            return trace_scope(traceparent)
    return _UNTRACED  # no SDK set up, or Database.apply called directly with any event


async def _record_async(work: Work, executor: AsyncExecutor) -> Rows:
    dedup = work.dedup(executor.dialect)
    failures = 0
    while dedup is not None:
        try:
            return await executor.run(dedup)
        except UniqueViolation:
            failures += 1
            if not work.dedup_again(executor.dialect, failures):
                raise
    return []


def _record_sync(work: Work, executor: SyncExecutor) -> Rows:
    dedup = work.dedup(executor.dialect)
    failures = 0
    while dedup is not None:
        try:
            return executor.run(dedup)
        except UniqueViolation:
            failures += 1
            if not work.dedup_again(executor.dialect, failures):
                raise
    return []


async def run_async(work: Work, executor: AsyncExecutor, session: Any) -> None:
    """The work inside the caller's open transaction, on an async session or connection."""
    recorded = await _record_async(work, executor)
    traced = tracing()
    for call in work.calls(recorded):
        with _span(call, work.group, traced):
            outcome = call.handler(call.argument, session)
            if isinstance(outcome, Awaitable):
                await outcome


def run_sync(work: Work, executor: SyncExecutor, session: Any) -> None:
    """The work inside the caller's open transaction, on a sync session (a worker thread)."""
    recorded = _record_sync(work, executor)
    traced = tracing()
    for call in work.calls(recorded):
        with _span(call, work.group, traced):
            call.handler(call.argument, session)
