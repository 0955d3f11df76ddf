"""The garbage collector settings of the relay's own process (`outbox-relay run`).

A drain keeps thousands of rows and records alive across the awaits of a cycle, so with
CPython's defaults (a young collection every 700 net allocations) they survived into the
oldest generation, and a full collection ran about once a second over the whole heap,
finding nothing to free: 80-100 ms each (measured with gc.callbacks during a 300k-event
drain), a stall of the event loop that every lane waited out, and CPU the relay spent on
nothing. The relay makes few reference cycles (rows, records and acks are freed by
reference counting when their cycle ends), so:

- the start-up heap (modules, settings, clients) is frozen: no collection walks it again;
- a young collection runs every YOUNG allocations net of frees, more than a cycle keeps
  alive at once, so a cycle's objects are mostly freed before any collection sees them.

Applied only by the command, never by RelayService itself: a host process that embeds the
service keeps its own collector settings.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # net allocations between young collections (CPython's default: 700)
OLDER = 20  # collections of a generation between collections of the next one (10)


def tune_collector() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG, OLDER, OLDER)
