"""A side task that does one step every interval until its daemon stops (gauges, lag,
purges): the one recipe, so each daemon writes only its step and what a failure logs.

    supervisor.spawn("purge", lambda: every(supervisor, 300.0, purge_once, failed=log_it))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from outbox_core.supervisor import Supervisor


async def every(
    supervisor: Supervisor,
    interval_s: float | Callable[[], float],
    step: Callable[[], Awaitable[object]],
    *,
    failed: Callable[[Exception], None],
    errors: tuple[type[Exception], ...] = (Exception,),
) -> None:
    """step(), then sleep interval_s (cut short when stopping), until the supervisor stops.
    interval_s may be a function, asked after each step (a loop that slows down while it
    has nothing to do).

    A failure of one of `errors` is handed to failed() and the next step comes after the
    interval as usual; any other failure ends the loop (Supervisor.spawn restarts it)."""
    while not supervisor.stopping.is_set():
        try:
            await step()
        except errors as exc:
            failed(exc)
        await supervisor.sleep(interval_s() if callable(interval_s) else interval_s)
