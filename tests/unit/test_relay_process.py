"""What the relay does for its event loop and its process: large batches cut into pieces
with a loop turn between them (outbox_core.supervisor.pieces), and the collector settings of
`outbox-relay run` (relay/cli.py)."""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Iterator

import pytest

from outbox_core.supervisor import PIECE, pieces
from relay.cli import OLDER, YOUNG, tune_collector


async def test_a_large_batch_gives_other_tasks_a_turn_between_pieces() -> None:
    items = list(range(3 * PIECE + 7))
    ticks = 0

    async def other_lane() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_lane())
    await asyncio.sleep(0)
    seen: list[tuple[int, int]] = []  # (offset, the other task's ticks when it came)
    joined: list[int] = []
    async for start, piece in pieces(items):
        seen.append((start, ticks))
        joined += piece
    task.cancel()
    assert joined == items
    assert [start for start, _ in seen] == [0, PIECE, 2 * PIECE, 3 * PIECE]
    assert all(a[1] < b[1] for a, b in itertools.pairwise(seen))


async def test_a_small_batch_is_one_piece_and_never_yields() -> None:
    ticks = 0

    async def other_lane() -> None:
        nonlocal ticks
        ticks += 1

    task = asyncio.create_task(other_lane())
    got = [(start, list(piece)) async for start, piece in pieces([1, 2, 3])]
    assert got == [(0, [1, 2, 3])]
    assert ticks == 0  # the other task had no turn: nothing was given away
    await task


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_relay_process_freezes_its_start_up_heap_and_collects_young_objects_rarely(
    collector: None,
) -> None:
    assert gc.get_freeze_count() == 0
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG, OLDER, OLDER)
