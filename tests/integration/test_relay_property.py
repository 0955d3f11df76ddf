"""The relay against random histories (a hypothesis state machine), on real Postgres and
SQLite with the in-memory publisher standing in for the broker.

A history mixes producer_lib emits (committed, rolled back, and on Postgres two open
transactions committing in reverse id order), relay cycles and their settles (each settle
held until the next claim has returned, or let go on its own), send failures of every
FailureReason at hand-over or at the ack, time passing for backoffs, operator retries
and discards of parked rows, relay crashes (everything in memory dropped, a new pipeline
built), lease takeovers whose old owner settles afterwards (a zombie), and quiet spells
where the relay runs until nothing is due.

After every step:
- nothing uncommitted reached the publisher;
- per key, each event first reached the publisher after every earlier committed event of
  its key (the order a deduplicating consumer applies them in);
- nothing committed is lost: a row the database no longer holds as unpublished was
  published, or discarded by the operator.
After a quiet spell, only keys with a failure of their own (injected, parked or backing
off) have rows left; a zombie's settle changes no row; at the end, with failures healed
and parked rows retried (or discarded when they can never go), every committed event has
been published.

CI runs a fixed, derandomized set of histories; `--full` runs many more and longer ones
from a seed printed at the start (`--hypothesis-seed=N` replays one).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections import defaultdict
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from outbox_core.sharding import shard_for
from producer_lib import Outbox
from relay.ops import admin
from relay.pipeline.ordering import KeyOrder
from relay.pipeline.step import Sent
from relay.store import ClaimedRow, Store
from relay.transport.errors import FailureReason, PublishFailed, TransportUnavailable
from relay.transport.memory import MemoryPublisher
from relay.transport.records import OutgoingRecord
from tests.support.db import Backend, sqlite_backend
from tests.support.relay import relay_settings
from tests.support.relay_harness import DrivenRelay
from tests.support.stores import RowState, make_store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")

BOOTSTRAP = "127.0.0.1:9092"  # never contacted: MemoryPublisher stands in for the broker
TOPIC = "orders"
# Two shards (fewer leases to take at every crash), three keys on one, one on the other:
# claims mix keys, takeovers move both shards.
SHARDS = 2


def keys_on(shard: int, count: int, prefix: str) -> list[str]:
    names = (f"{prefix}-{i}" for i in range(1000))
    return [k for k in names if shard_for(k, SHARDS) == shard][:count]


KEYS = [*keys_on(0, 3, "a"), *keys_on(1, 1, "b")]
MAX_REQUEST = 1024  # kafka_max_request_size: an event past it is refused before sending
QUIET_CYCLES = 12  # a quiet spell reaches nothing-due within this many cycles


class Broken(AssertionError):
    """An invariant of the relay does not hold."""


class OrderBroken(Broken):
    pass


class UncommittedPublished(Broken):
    pass


class Lost(Broken):
    pass


class HeldBack(Broken):
    pass


class ZombieWrote(Broken):
    pass


@dataclass(frozen=True)
class Injection:
    """Records of a key fail for `reason`, at hand-over (refuse) or at the ack (fail)."""

    reason: FailureReason
    stage: str
    generation: int  # a broken producer's failures end when it is recreated


@dataclass
class OpenTx:
    conn: Any
    key: str
    event_id: str


def event_id_of(record: OutgoingRecord) -> str:
    return dict(record.headers)["event_id"].decode()


class RelayMachine(RuleBasedStateMachine):
    backend: ClassVar[Backend]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        b = self.backend
        self.db = b.connect()  # the test's reads and time travel
        if b.dialect == "mariadb":  # time travel beside open producer transactions
            self.execute("session_read_committed")
        for name in ("outbox_events_clear", "leases_clear", "replicas_clear"):
            self.execute(name)  # each history starts from empty tables
        self.outbox = Outbox(shard_count=SHARDS)
        self.producer = b.connect()
        self.spare: list[Any] = []  # connections for open transactions (Postgres)
        self.open: list[OpenTx] = []
        self.broker = MemoryPublisher(refuse=self._refuse, fail=self._fail)
        self.injected: dict[str, Injection] = {}
        self.committed: dict[str, str] = {}  # event_id -> key
        self.order: dict[str, list[str]] = defaultdict(list)  # key -> event_ids, commit order
        self.uncommitted: set[str] = set()  # rolled back, or in an open transaction
        self.too_large: set[str] = set()
        self.discarded: set[str] = set()
        self.resolved: set[str] = set()  # reached the publisher, or discarded
        self.checked = 0  # broker.sent[:checked] has been judged
        self.keep = True
        self.incarnation = 0
        self.relay: DrivenRelay | None = None
        self.zombies: list[DrivenRelay] = []
        self.stores: list[Store] = []
        self.shared: Store | None = None  # SQLite: one relay per file, so one store

    # ------------------------------------------------------------------ plumbing

    def fetch(self, name: str) -> list[tuple[Any, ...]]:
        rows = self.backend.run_on(self.db, name)
        self.db.commit()
        return rows

    def execute(self, name: str) -> None:
        self.backend.run_on(self.db, name)
        self.db.commit()

    def run(self, coro: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await coro

        return self.loop.run_until_complete(wrapped())

    def _active(self, record: OutgoingRecord, stage: str) -> PublishFailed | None:
        injection = self.injected.get(record.key.decode())
        if injection is None or injection.stage != stage:
            return None
        if injection.reason.fatal and injection.generation != self.broker.recreated:
            return None
        return PublishFailed(injection.reason, f"injected {injection.reason.label}")

    def _refuse(self, record: OutgoingRecord) -> PublishFailed | None:
        return self._active(record, "refuse")

    def _fail(self, record: OutgoingRecord) -> PublishFailed | None:
        return self._active(record, "fail")

    def failing(self, key: str) -> bool:
        injection = self.injected.get(key)
        return injection is not None and not (
            injection.reason.fatal and injection.generation != self.broker.recreated
        )

    async def _store(self) -> Store:
        if self.backend.dialect == "sqlite" and self.shared is not None:
            return self.shared
        store = make_store(self.backend)
        await store.open()
        self.stores.append(store)
        if self.backend.dialect == "sqlite":
            self.shared = store
        return store

    async def _new_relay(self) -> DrivenRelay:
        """A new replica takes every shard: the leases and the membership of the last one
        have lapsed (it died, or is paused)."""
        self.execute("leases_lapse")
        self.execute("replicas_lapse")
        self.incarnation += 1
        settings = relay_settings(
            self.backend,
            BOOTSTRAP,
            replica_id=f"relay-{self.incarnation}",
            lease_ttl_s=600.0,
            heartbeat_interval_s=1.0,
            # Backoffs outlast any history; time_passes ends them, so what is due never
            # depends on how fast the machine runs.
            backoff_base_s=3600.0,
            backoff_max_s=7200.0,
            max_attempts=3,
            batch_size=100,
            retention="keep" if self.keep else "delete",
            kafka_max_request_size=MAX_REQUEST,
        )
        relay = DrivenRelay(settings, await self._store(), self.broker, SHARDS)
        changes = await relay.start()
        assert changes is not None
        assert len(changes.acquired) == SHARDS
        return relay

    def _emit(self, conn: Any, key: str, large: bool = False) -> str:
        payload: dict[str, Any] = {"key": key}
        if large:
            payload["pad"] = "x" * (MAX_REQUEST + 1)
        return str(
            self.outbox.emit(conn, topic=TOPIC, key=key, event_type="Placed", payload=payload)
        )

    def _committed(self, event_id: str, key: str) -> None:
        self.uncommitted.discard(event_id)
        self.committed[event_id] = key
        self.order[key].append(event_id)

    def _locked(self, key: str) -> bool:
        # producer_lib's per-key lock: a second writer of the key would wait for the open one
        return any(tx.key == key for tx in self.open)

    async def _cycle(self, relay: DrivenRelay) -> Sent | None:
        try:
            return await relay.cycle()
        except TransportUnavailable:
            return None  # the loop backs off and retries; nothing was charged

    # ------------------------------------------------------------------ history

    @initialize(keep=st.booleans())
    def start(self, keep: bool) -> None:
        self.keep = keep
        self.relay = self.run(self._new_relay())

    @rule(key=st.sampled_from(KEYS))
    def emit(self, key: str) -> None:
        if self._locked(key):
            return
        event_id = self._emit(self.producer, key)
        self.producer.commit()
        self._committed(event_id, key)

    @rule(key=st.sampled_from(KEYS))
    def emit_too_large(self, key: str) -> None:
        if self._locked(key):
            return
        event_id = self._emit(self.producer, key, large=True)
        self.producer.commit()
        self.too_large.add(event_id)
        self._committed(event_id, key)

    @rule(key=st.sampled_from(KEYS))
    def emit_rolled_back(self, key: str) -> None:
        if self._locked(key):
            return
        self.uncommitted.add(self._emit(self.producer, key))
        self.producer.rollback()

    @precondition(lambda self: self.backend.dialect != "sqlite" and len(self.open) < 2)
    @rule(key=st.sampled_from(KEYS))
    def open_transaction(self, key: str) -> None:
        """An emit whose transaction stays open (SQLite has one writer at a time: there,
        commits follow id order by construction)."""
        if self._locked(key):
            return
        conn = self.spare.pop() if self.spare else self.backend.connect()
        event_id = self._emit(conn, key)
        self.uncommitted.add(event_id)
        self.open.append(OpenTx(conn, key, event_id))

    @precondition(lambda self: bool(self.open))
    @rule()
    def commit_in_reverse(self) -> None:
        """The open transactions commit, the later id first."""
        for tx in reversed(self.open):
            tx.conn.commit()
            self._committed(tx.event_id, tx.key)
            self.spare.append(tx.conn)
        self.open.clear()

    @precondition(lambda self: bool(self.open))
    @rule()
    def roll_back_open(self) -> None:
        for tx in self.open:
            tx.conn.rollback()
            self.spare.append(tx.conn)
        self.open.clear()

    @rule()
    def cycle(self) -> None:
        assert self.relay is not None
        self.run(self._cycle(self.relay))

    @precondition(lambda self: self.relay is not None and self.relay.settling)
    @rule()
    def settle(self) -> None:
        assert self.relay is not None
        self.run(self.relay.settle())

    @rule(
        key=st.sampled_from(KEYS),
        reason=st.sampled_from(list(FailureReason)),
        stage=st.sampled_from(["refuse", "fail"]),
    )
    def inject(self, key: str, reason: FailureReason, stage: str) -> None:
        self.injected[key] = Injection(reason, stage, self.broker.recreated)

    @precondition(lambda self: bool(self.injected))
    @rule(data=st.data())
    def heal(self, data: st.DataObject) -> None:
        del self.injected[data.draw(st.sampled_from(sorted(self.injected)))]

    @rule()
    def time_passes(self) -> None:
        self.execute("outbox_backoff_end")

    @rule(key=st.sampled_from(KEYS))
    def operator_retry(self, key: str) -> None:
        admin.parked_retry(self.backend.url, admin.RowFilter(key=key))

    @rule(key=st.sampled_from(KEYS))
    def operator_discard(self, key: str) -> None:
        ids = {int(r[0]): str(r[1]) for r in self.fetch("outbox_rows")}
        changed = admin.parked_discard(self.backend.url, admin.RowFilter(key=key))
        self._discarded(ids[i] for i in changed.ids)

    def _discarded(self, event_ids: Iterator[str]) -> None:
        for event_id in event_ids:
            self.discarded.add(event_id)
            self.resolved.add(event_id)

    @rule()
    def heartbeat(self) -> None:
        assert self.relay is not None
        self.run(self.relay.leases.run_once())

    @rule()
    def crash(self) -> None:
        """The relay dies, whatever it had sent and not settled; a new one takes over."""
        assert self.relay is not None
        self.run(self.relay.crash())
        self.relay = self.run(self._new_relay())

    @rule()
    def takeover(self) -> None:
        """The relay pauses past its lease (its settle still to come); a new one takes
        every shard."""
        assert self.relay is not None
        self.zombies.append(self.relay)
        self.relay = self.run(self._new_relay())

    @precondition(lambda self: any(z.settling for z in self.zombies))
    @rule()
    def zombie_settles(self) -> None:
        zombie = next(z for z in self.zombies if z.settling)
        before = self.fetch("outbox_snapshot")
        outcome = self.run(zombie.settle())
        after = self.fetch("outbox_snapshot")
        if before != after:
            raise ZombieWrote(f"{zombie.owner}'s settle after its leases were taken changed rows")
        assert outcome is not None
        assert outcome.published == 0
        assert outcome.lost  # the shards of its batch, every one taken over

    @rule()
    def quiet_spell(self) -> None:
        """The relay runs until nothing is due; only keys with a failure of their own may
        have rows left."""
        assert self.relay is not None
        self.run(self._quiesce(self.relay))
        self._check_only_failed_keys_wait()

    async def _quiesce(self, relay: DrivenRelay) -> None:
        if relay.settling:
            await relay.settle()
        for _ in range(QUIET_CYCLES):
            producer = self.broker.recreated
            sent = await self._cycle(relay)
            if relay.settling:
                await relay.settle()
            if sent is None and producer == self.broker.recreated:
                return  # nothing due (a new producer would have been tried again at once)
        raise HeldBack(f"still claiming after {QUIET_CYCLES} cycles with nothing changing")

    def _check_only_failed_keys_wait(self) -> None:
        states = {
            int(i): RowState(int(i), int(a), str(st_), e, bool(p), float(t))
            for i, a, st_, e, p, t in self.fetch("outbox_row_state")
        }
        by_key: dict[str, list[int]] = defaultdict(list)
        waiting: list[tuple[int, str, str]] = []
        for row in self.fetch("outbox_rows"):
            row_id, event_id, key = int(row[0]), str(row[1]), str(row[3])
            by_key[key].append(row_id)
            if not states[row_id].published:
                waiting.append((row_id, event_id, key))

        def blocks(row_id: int) -> bool:
            s = states[row_id]
            return not s.published and (
                s.status == "parked" or (s.attempts > 0 and s.available_in_s > 0)
            )

        for row_id, event_id, key in waiting:
            if self.failing(key):
                continue
            if any(blocks(other) for other in by_key[key] if other <= row_id):
                continue
            raise HeldBack(
                f"event {event_id} (row {row_id}, key {key}) is still unpublished after a "
                "quiet spell, with no failure of its key"
            )

    # ------------------------------------------------------------------ invariants

    @invariant()
    def publisher_order(self) -> None:
        sent = self.broker.sent
        for record in sent[self.checked :]:
            event_id = event_id_of(record)
            key = self.committed.get(event_id)
            if key is None or event_id in self.uncommitted:
                raise UncommittedPublished(f"event {event_id} published, never committed")
            if event_id in self.resolved:
                continue  # a duplicate (after a crash or a lost lease): allowed
            order = self.order[key]
            earlier = order[: order.index(event_id)]
            missing = [e for e in earlier if e not in self.resolved]
            if missing:
                raise OrderBroken(
                    f"key {key}: event {event_id} published before earlier events {missing}"
                )
            self.resolved.add(event_id)
        self.checked = len(sent)

    @invariant()
    def nothing_lost(self) -> None:
        unpublished = set(self._unpublished())
        published = {event_id_of(r) for r in self.broker.sent}
        for event_id in self.committed:
            if event_id in unpublished or event_id in self.discarded:
                continue
            if event_id not in published:
                raise Lost(f"event {event_id} is marked published or gone, never published")

    # ------------------------------------------------------------------ the end

    def _unpublished(self) -> list[str]:
        return [str(r[1]) for r in self.fetch("outbox_rows") if r[10] is None]

    def _drain(self) -> None:
        """Failures healed and parked rows dealt with, everything committed goes out."""
        relay = self.relay
        assert relay is not None
        self.injected.clear()
        # A too-large row parks (and is discarded) only once the rows before it are out.
        for _ in range(len(self.committed) + 2):
            if not self._unpublished():
                break
            self.execute("outbox_backoff_end")
            parked = admin.parked_list(self.backend.url, admin.RowFilter(limit=None))
            never = [p.id for p in parked if p.event_id in self.too_large]
            done = admin.parked_act(self.backend.url, "discard", never)
            ids = {p.id: p.event_id for p in parked}
            self._discarded(ids[i] for i in done.ids)
            admin.parked_act(self.backend.url, "retry", [p.id for p in parked if p.id not in never])
            self.run(self._quiesce(relay))
            self.publisher_order()
            self.nothing_lost()
        left = self._unpublished()
        if left:
            raise Lost(f"events never published: {left}")
        published = {event_id_of(r) for r in self.broker.sent}
        missing = set(self.committed) - self.discarded - published
        if missing:
            raise Lost(f"committed events never published: {sorted(missing)}")

    def teardown(self) -> None:
        try:  # the drain only when the history passed: a failure stays the one reported
            if sys.exc_info()[0] is None and self.relay is not None:
                self._drain()
        finally:
            self._close()

    def _close(self) -> None:
        for relay in [*self.zombies, *filter(None, [self.relay])]:
            with contextlib.suppress(Exception):
                self.run(relay.crash())
        for store in self.stores:
            with contextlib.suppress(Exception):
                self.run(store.close())
        for conn in [self.db, self.producer, *self.spare, *(tx.conn for tx in self.open)]:
            with contextlib.suppress(Exception):
                conn.rollback()
                conn.close()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


def machine_on(empty: Backend) -> type[RelayMachine]:
    """The machine on this test's own database, migrated with SHARDS shards."""
    empty.migrate(shard_count=SHARDS)
    backend = empty
    return type(f"RelayOn{backend.dialect.title()}", (RelayMachine,), {"backend": backend})


def hypothesis_settings(full: bool, **over: Any) -> settings:
    values: dict[str, Any] = {
        "max_examples": 300 if full else 30,
        "stateful_step_count": 80 if full else 40,
        "deadline": None,
        "derandomize": not full,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
        **over,
    }
    return settings(**values)


def prepared(
    machine: type[RelayMachine], full: bool, capsys: pytest.CaptureFixture[str], config: Any
) -> type[RelayMachine]:
    if not full:
        return machine
    chosen = config.getoption("hypothesis_seed", None)
    number = int(chosen) if chosen is not None else random.randrange(2**32)
    with capsys.disabled():
        print(f"\n{machine.__name__}: hypothesis seed {number} (--hypothesis-seed={number})")
    return seed(number)(machine)


def test_the_relay_keeps_its_guarantees_over_random_histories(
    empty_backend: Backend,
    full_size: bool,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    machine = prepared(machine_on(empty_backend), full_size, capsys, request.config)
    run_state_machine_as_test(machine, settings=hypothesis_settings(full_size))


_PLAN = KeyOrder.plan


def _plan_forgetting_refused_keys(
    self: KeyOrder,
    rows: list[ClaimedRow],
    records: list[OutgoingRecord],
    oversized: dict[int, int],
    limit: int,
    malformed: dict[int, str] | None = None,
) -> Any:
    plan = _PLAN(self, rows, records, oversized, limit, malformed)
    refused = {rows[i].key for i in oversized}
    for i, row in enumerate(rows):
        if row.key in refused and i not in oversized and row not in plan.sending:
            plan.sending.append(row)  # the bug: sent although an earlier row was refused
            plan.records.append(records[i])
            plan.held_back -= 1
    return plan


def test_a_planted_ordering_bug_is_found(
    sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted bug: KeyOrder.plan forgets the key of a row it refuses for its size, so
    the later rows of that key in the same claim go out while the refused one is parked.
    The machine must find a history where an event reaches the publisher before an
    earlier one of its key. On SQLite only: KeyOrder is the same on both, and SQLite's
    histories run faster."""
    monkeypatch.setattr(KeyOrder, "plan", _plan_forgetting_refused_keys)
    find = hypothesis_settings(
        False, max_examples=400, phases=[Phase.generate], report_multiple_bugs=False
    )
    with pytest.raises(OrderBroken):
        run_state_machine_as_test(machine_on(sqlite_backend(sqlite_path)), settings=find)
