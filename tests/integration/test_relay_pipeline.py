"""The step's overlap on real Postgres and SQLite (the library's in-memory publisher
standing in for Kafka), driven as the relay's loop drives it (Step.send, one cycle after
another): the next batch is claimed and sent while the previous one's settle is still to
come. Its rows are not claimed twice, and a key whose earlier row failed in the previous
batch sends nothing more until that failure is recorded."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from relay.pipeline.step import BatchOutcome, Sent, Step
from relay.store import ClaimedRow, ClaimRequest, Settled, SettleRequest, Store
from relay.transport.memory import MemoryPublisher
from tests.integration.test_run_once import event_ids, failing, lease, sent, settings_for
from tests.support.db import Backend
from tests.support.stores import emit, event, keys_on_shard, row_states

pytestmark = pytest.mark.integration

SHARD = 3


class SettleAfterNextClaim:
    """The store, whose first settle waits until the next claim has returned: that claim
    runs while the previous batch's settle is in flight, as a claim of the relay's loop
    may, however the event loop happens to schedule them."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self._claims = 0
        self._claimed_again = asyncio.Event()
        self._gated = True

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        rows = await self._inner.claim(request)
        self._claims += 1
        if self._claims > 1:
            self._claimed_again.set()
        return rows

    async def settle(self, request: SettleRequest) -> Settled:
        if self._gated:
            self._gated = False
            await self._claimed_again.wait()
        return await self._inner.settle(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def overlapping(store: Store, **parts: Any) -> tuple[Step, list[BatchOutcome | None]]:
    """A step on the gated store, and the outcomes of its settles as they end."""
    outcomes: list[BatchOutcome | None] = []

    async def on_settled(sent: Sent, outcome: BatchOutcome | None) -> None:
        outcomes.append(outcome)

    gated = cast(Store, SettleAfterNextClaim(store))
    return Step(store=gated, on_settled=on_settled, **parts), outcomes


async def test_the_next_claim_skips_rows_in_flight_and_holds_back_a_failed_key(
    backend: Backend, store: Store
) -> None:
    k, x = keys_on_shard(SHARD, 2)
    k1, x1 = emit(backend, event(k), event(x))
    eid = event_ids(backend)
    # k1's backoff must outlast the test however slow the machine: the last claim checks
    # that the database itself holds k2 behind it.
    settings = settings_for(backend, backoff_base_s=60.0, backoff_max_s=120.0)
    rules = settings.batch_rules()
    publisher = MemoryPublisher(fail=failing({eid[k1]}, retriable=True))
    tokens = {SHARD: await lease(store, settings)}

    step, outcomes = overlapping(store, rules=rules, publisher=publisher)

    previous = await step.send(tokens)
    assert previous is not None
    assert [r.id for r in previous.published] == [x1]
    assert [f.id for f in previous.failures] == [k1]
    # Committed while the previous batch's settle has not run: k2 is due, and the
    # database does not know yet that k1 failed.
    k2, x2 = emit(backend, event(k), event(x))
    eid = event_ids(backend)

    after = await step.send(tokens)  # the previous settle has ended when it returns
    assert after is not None
    # x1 was not claimed again (no duplicate); k2 was not even read: it would have
    # reached Kafka ahead of k1, whose retry is still to come.
    assert sorted(r.id for r in after.rows) == [x2]
    assert [r.id for r in after.published] == [x2]
    assert k2 not in {r.id for r in after.rows}
    assert sent(publisher) == [eid[x1], eid[x2]]

    second = await step.settled()
    (first,) = outcomes[:1]
    assert first is not None
    assert second is not None
    assert (first.published, first.retried, second.published) == (1, 1, 1)
    states = row_states(backend)
    assert sorted(states) == [k1, k2]  # published rows deleted; k1 backs off, k2 waits
    assert (states[k1].attempts, states[k2].attempts) == (1, 0)
    # And now the database holds k2 back behind k1's backoff by itself.
    assert await step.send(tokens) is None


async def test_rows_held_for_a_later_record_batch_go_out_with_the_next_claim(
    backend: Backend, store: Store
) -> None:
    """A key whose rows would span two record batches keeps the later ones for the next
    claim; they are not in flight, so the overlapping claim takes them again, in order."""
    (k,) = keys_on_shard(SHARD, 1)
    ids = emit(backend, *(event(k) for _ in range(4)))
    eid = event_ids(backend)
    settings = settings_for(backend)
    rules = settings.batch_rules()
    publisher = MemoryPublisher(max_key_records=2)
    tokens = {SHARD: await lease(store, settings)}

    step, outcomes = overlapping(store, rules=rules, publisher=publisher)

    previous = await step.send(tokens)
    assert previous is not None
    assert [r.id for r in previous.published] == ids[:2]
    assert previous.held_back == 2
    after = await step.send(tokens)
    assert after is not None
    assert [r.id for r in after.published] == ids[2:]
    assert sent(publisher) == [eid[i] for i in ids]
    await step.settled()
    assert len(outcomes) == 2
    assert row_states(backend) == {}
