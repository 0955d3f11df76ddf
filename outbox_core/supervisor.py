"""What both daemons (the relay, a consumer) need to run loops: one recipe each for
sleeping, retrying, supervising named tasks and telling /healthz that they are alive.

- `sleep` returns early when the daemon stops (or when any extra event is set).
- `retry` is the one retry loop: retriable errors only, until it works or the daemon stops
  (then the last error is raised), waiting RETRY_BACKOFF's jittered waits
  (outbox_core.backoff) between tries.
- `spawn` runs a named loop and restarts it, after a pause, when it fails unexpectedly.
- `tick` marks progress; `healthz` fails when no loop has ticked for too long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from outbox_core.backoff import BackoffPolicy
from outbox_core.driver_errors import first_line
from outbox_core.ops_http import Probe

T = TypeVar("T")

# The first wait after a failed call is up to 0.2 s, each later one up to twice the last,
# never above 10 s: a broker or database back within a second is hardly noticed, and a
# long outage costs a try every 5-10 s.
RETRY_BACKOFF = BackoffPolicy(base_s=0.2, max_s=10.0, jitter=True)
RESTART_DELAY_S = 1.0
# Shutdown: how long cancelled tasks get to end, and how often one still running is
# cancelled again.
CANCEL_WAIT_S = 10.0
RECANCEL_S = 1.0


class Wake(asyncio.Event):
    """An Event that `Supervisor.sleep` watches without a task: set() also ends the
    sleeps registered on it. The relay's cycle sleeps a few milliseconds hundreds of times
    a second; a task per event watched cost it more than the sleep itself."""

    def __init__(self) -> None:
        super().__init__()
        self._sleepers: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        super().set()
        for sleeper in self._sleepers:
            _end(sleeper)


def _end(sleeper: asyncio.Future[None]) -> None:
    if not sleeper.done():
        sleeper.set_result(None)


class Supervisor:
    def __init__(
        self, log: logging.Logger, *, retry_backoff: BackoffPolicy = RETRY_BACKOFF
    ) -> None:
        self.log = log
        self.retry_backoff = retry_backoff
        self.stopping = Wake()
        self.last_tick = time.monotonic()
        self.tasks: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ liveness

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def healthz(self, limit_s: float) -> Probe:
        """Alive when some loop ticked within limit_s (an outage being retried ticks too)."""
        quiet = time.monotonic() - self.last_tick
        if quiet > limit_s:
            return Probe(False, f"no loop tick for {quiet:.1f}s (limit {limit_s:.0f}s)")
        return Probe(True, "ok")

    # ------------------------------------------------------------------ waiting

    def stop(self) -> None:
        self.stopping.set()

    async def sleep(self, seconds: float, *wake: asyncio.Event) -> None:
        """Sleep, returning early when stopping or when any of `wake` is set."""
        events = [self.stopping, *wake]
        if any(e.is_set() for e in events):
            return
        wakes = [e for e in events if isinstance(e, Wake)]
        if len(wakes) == len(events):
            loop = asyncio.get_running_loop()
            sleeper: asyncio.Future[None] = loop.create_future()
            timer = loop.call_later(seconds, _end, sleeper)
            for e in wakes:
                e._sleepers.add(sleeper)
            try:
                await sleeper
            finally:
                timer.cancel()
                for e in wakes:
                    e._sleepers.discard(sleeper)
            return
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def retry(
        self,
        what: str,
        call: Callable[[], Awaitable[T]],
        retriable: Callable[[BaseException], bool],
    ) -> T:
        """call() until it returns; retriable failures are retried with backoff (logged,
        and counted as a tick: retrying is the loop at work, so /healthz stays green
        through an outage). Raises the last error once stopping, or a non-retriable one."""

        try:
            return await call()  # the common case: no retry machinery built per call
        except Exception as exc:
            if self.stopping.is_set() or not retriable(exc):
                raise
            self._log_retry(what, 1, exc)
            await self.sleep(self.retry_backoff.delay_s(0))

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self._log_retry(what, state.attempt_number + 1, exc)

        # Attempt 1 failed above, so when tenacity's attempt n fails, n + 1 calls have.
        def wait(state: RetryCallState) -> float:
            return self.retry_backoff.delay_s(state.attempt_number)

        retrying = AsyncRetrying(
            retry=retry_if_exception(retriable),
            wait=wait,
            stop=lambda _state: self.stopping.is_set(),
            sleep=self.sleep,
            before_sleep=log_retry,
            reraise=True,
        )
        result: T | None = None
        async for attempt in retrying:
            with attempt:
                result = await call()
        return result  # type: ignore[return-value]

    def _log_retry(self, what: str, attempt: int, exc: BaseException | None) -> None:
        self.tick()
        self.log.warning(
            f"{what} failed; retrying",
            extra={"attempt": attempt, "error": first_line(exc) if exc is not None else ""},
        )

    # ------------------------------------------------------------------ tasks

    def spawn(self, name: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run body as the task `name`; an unexpected failure is logged and body runs again
        after a pause, until it returns or the daemon stops."""

        async def supervised() -> None:
            while not self.stopping.is_set():
                try:
                    await body()
                    return
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.log.exception("task failed; restarting", extra={"task": name})
                    await self.sleep(RESTART_DELAY_S)

        task = asyncio.create_task(supervised(), name=name)
        self.tasks[name] = task
        task.add_done_callback(lambda t: self.tasks.get(name) is t and self.tasks.pop(name))
        return task

    async def cancel_all(self, wait_s: float = CANCEL_WAIT_S) -> None:
        """Cancel every supervised task and wait up to wait_s for them to end. One still
        running then is named in a warning, with where it waits, and left behind: a
        daemon told to stop must stop. (A cancellation can be lost: in Python 3.11,
        asyncio.wait_for swallows it when what it waits for has just finished, and a task
        cancelled again a moment later ends.)"""
        tasks, self.tasks = dict(self.tasks), {}
        deadline = time.monotonic() + wait_s
        running = set(tasks.values())
        while running:
            for task in running:
                task.cancel()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _, running = await asyncio.wait(running, timeout=min(left, RECANCEL_S))
        for name, task in tasks.items():
            if task in running:
                self.log.warning(
                    "task did not stop when cancelled; stopping without it",
                    extra={"task": name, "waiting_at": _waiting_at(task)},
                )
            else:
                if not task.cancelled():
                    task.exception()  # retrieved: asyncio would log it at collection
                self.log.debug("task stopped", extra={"task": name})


# A long synchronous stretch over many items blocks every other task of the event loop:
# with the relay's fair turns, the quick lane and the bulk lane share one loop, and a bulk
# claim's stretches (decoding thousands of rows, building their records, handing them to
# the producer) ran 15-130 ms each; every step of the quick lane that came due meanwhile
# waited for the stretch to end, and that wait set a quiet tenant's p99. Cut into pieces, a
# stretch lasts under a millisecond; up to PIECE items are one piece and never yield.
# Pieces of 128 rows gave the quiet tenant a p99 of 43-69 ms beside a 500,000-event drain,
# against 73-120 ms with 512 (bench/tenant_fairness.py, alternating runs), at no cost to
# the drain that the bench could tell from its noise; 32 and 64 did no better than 128.
PIECE = 128  # items: under a millisecond of per-row work on the relay's machine kind


async def pieces(items: Sequence[T]) -> AsyncIterator[tuple[int, Sequence[T]]]:
    """(offset, slice) of at most PIECE items each, with a loop turn between slices."""
    for start in range(0, len(items), PIECE):
        if start:
            await asyncio.sleep(0)
        yield start, items[start : start + PIECE]


def _waiting_at(task: asyncio.Task[None]) -> str:
    """Where a suspended task waits: its chain of awaits, outermost first, each as
    function (file:line); Task.get_stack gives only the outermost frame of a suspended one."""
    chain = []
    step: object = task.get_coro()
    while (frame := getattr(step, "cr_frame", None)) is not None:
        chain.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        step = getattr(step, "cr_await", None)
    return " > ".join(chain) or "unknown"
