"""consumer_lib's batch apply on real Kafka and real databases, with every adapter.

A partition's records of one fetch are applied in one transaction: one dedup statement,
the handlers in order, one commit. These scenarios prove what that must keep: each event
applied once (duplicates inside a batch too), a failing record alone retried or
dead-lettered while its neighbours commit, the whole batch retried when the database goes
away in the middle of it, `batch=False` and `on_batch` handlers, and a revocation that
does not wait for a database that is away. The database is cut through a loopback proxy
(tests/support/ops.TcpGate), never by stopping the shared server.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest

from consumer_lib import ConsumedEvent, ConsumerApp, PsycopgAsync
from consumer_lib import consumer as consumer_module
from tests.conftest import TopicFactory
from tests.support.consumers import (
    ADAPTERS,
    Outgoing,
    RunningConsumer,
    bulk_effect_handler,
    committed_offsets,
    dead_letters,
    dedup_transactions,
    effect_handler,
    effect_problems,
    effects,
    fast_settings,
    header,
    make_database,
    make_events,
    new_group,
    offset_problems,
    processed_ids,
    produce,
    running_consumer,
    wait_committed,
)
from tests.support.db import Backend, postgres_backend
from tests.support.ops import TcpGate, tcp_gate
from tests.support.waits import until

pytestmark = pytest.mark.integration


def adjacent_duplicates(events: list[Outgoing], every: int) -> list[Outgoing]:
    """The events with a copy of every `every`-th right after it: in the same fetch, so in
    the same batch."""
    out: list[Outgoing] = []
    for i, event in enumerate(events):
        out.append(event)
        if i % every == 0:
            out.append(event)
    return out


def through(gate: TcpGate, pg: Backend) -> Backend:
    """The same database, reached through the gate."""
    server = urlsplit(pg.target).netloc.rpartition("@")[2]
    return postgres_backend(pg.target.replace(server, gate.address, 1))


def cut_from_handler(gate: TcpGate) -> None:
    """Cut the gate from inside a handler: on the loop's thread, or (SqlAlchemySync) from its
    worker thread, waiting until it is cut so the transaction cannot commit first."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        done = threading.Event()
        assert gate.loop is not None

        def cut() -> None:
            gate.cut()
            done.set()

        gate.loop.call_soon_threadsafe(cut)
        assert done.wait(10), "the gate was not cut"
        return
    gate.cut()


# --------------------------------------------------------------------------- the batch path


async def test_each_adapter_applies_a_fetch_in_few_transactions_skipping_duplicates_in_it(
    case: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    adapter, backend = case
    topic = await topics("batches", partitions=2)
    events = make_events(200, keys=30, partitions=2, seed=21)
    layout = await produce(kafka_bootstrap, topic, adjacent_duplicates(events, 10))
    calls: list[ConsumedEvent] = []
    group = new_group()
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, backend))
    app.handler(topic, "OrderPlaced")(effect_handler(adapter, backend.dialect, group, calls=calls))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    assert effect_problems(effects(backend), layout.event_ids, group) == []
    assert processed_ids(backend, group) == layout.event_ids
    # The copy next to its original, in the same batch, never reached the handler.
    assert len(calls) == 200
    assert (stats.processed, stats.duplicates) == (200, 20)
    # 200 events in a handful of transactions (a transaction per event would be 200).
    assert dedup_transactions(backend, group) <= 20


async def test_a_record_failing_mid_batch_alone_goes_to_retry_then_dead_letter(
    case: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """The batch rolls back and is re-applied a record at a time: the failing record is
    retried (max_attempts) and dead-lettered, every other record of the batch is applied
    exactly once; an undecodable record in the middle of the fetch is dead-lettered too."""
    adapter, backend = case
    topic = await topics("batch-poison")
    events = make_events(30, keys=5, seed=22)
    undecodable = Outgoing(
        key="key-x",
        value=b"{not json",
        headers=(
            ("event_id", str(uuid.uuid4()).encode()),
            ("event_type", b"OrderPlaced"),
            ("content-type", b"application/json"),
        ),
    )
    records = [*events[:20], undecodable, *events[20:]]
    layout = await produce(kafka_bootstrap, topic, records)
    poison = str(events[10].event_id)
    calls: list[ConsumedEvent] = []

    def fail(event: ConsumedEvent) -> None:
        if str(event.event_id) == poison:  # after its effect row: the rollback takes it away
            raise ValueError(f"boom {poison}")

    group = new_group()
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, max_attempts=3), make_database(adapter, backend)
    )
    app.handler(topic)(
        effect_handler(adapter, backend.dialect, group, after_write=fail, calls=calls)
    )
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    expected = {str(e.event_id) for e in events} - {poison}
    assert effect_problems(effects(backend), expected, group) == []
    assert processed_ids(backend, group) == expected
    per_event = Counter(str(e.event_id) for e in calls)
    # Once in the batch that rolled back, then max_attempts times alone.
    assert per_event[poison] == 4
    assert stats.handler_failures == 3  # the batch's failure is no attempt of the record
    assert (stats.dead_lettered, stats.processed) == (2, 29)
    dead = sorted(await dead_letters(kafka_bootstrap, topic), key=lambda r: r.offset)
    assert [header(d, "dlt.original.offset") for d in dead] == ["10", "20"]
    assert [header(d, "dlt.error.type") for d in dead] == ["ValueError", "PoisonRecord"]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_the_database_lost_mid_batch_retries_the_whole_batch_once_it_is_back(
    adapter: str, pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """The connection is reset while a batch's handlers run (its rows written, not
    committed) and stays refused for 2 s: the batch rolls back, is retried whole as a
    transient failure, and every event is applied exactly once, nothing dead-lettered."""
    topic = await topics("batch-lost")
    events = make_events(120, keys=10, seed=23)
    layout = await produce(kafka_bootstrap, topic, events)
    middle = events[60].event_id
    calls: list[ConsumedEvent] = []
    async with tcp_gate(urlsplit(pg.target).netloc.rpartition("@")[2]) as gate:
        await gate.open()
        cut = threading.Event()

        def lose(event: ConsumedEvent) -> None:
            if str(event.event_id) == middle and not cut.is_set():
                cut.set()
                cut_from_handler(gate)

        group = new_group()
        app = ConsumerApp(
            fast_settings(kafka_bootstrap, group, max_attempts=2),
            make_database(adapter, through(gate, pg)),
        )
        app.handler(topic)(
            effect_handler(adapter, "postgres", group, after_write=lose, calls=calls)
        )
        async with running_consumer(app) as running:

            async def was_cut() -> bool:
                return cut.is_set()

            await until(was_cut, 60, "the gate cut mid-batch", alive=running.check_alive)

            async def retried() -> bool:
                return bool(running.stats.transient_retries >= 1)

            # The batch failed on the cut and is being retried while the gate stays shut.
            await until(retried, 60, "a transient retry", alive=running.check_alive)
            await gate.open()
            await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
        stats = running.stats

    assert effect_problems(effects(pg), layout.event_ids, group) == []
    assert (stats.dead_lettered, stats.handler_failures, stats.processed) == (0, 0, 120)
    per_event = Counter(str(e.event_id) for e in calls)
    # The records before it in its batch ran again on the retry: the whole batch was redone.
    assert sum(1 for e in events[:60] if per_event[str(e.event_id)] >= 2) >= 1
    assert await dead_letters(kafka_bootstrap, topic) == []


# --------------------------------------------------------------------------- opting out, bulk


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_batch_false_handler_gets_a_transaction_per_event(
    adapter: str, pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    topic = await topics("batch-off")
    events = make_events(40, keys=5, seed=24)
    layout = await produce(kafka_bootstrap, topic, events)
    group = new_group()
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, pg))
    app.handler(topic, batch=False)(effect_handler(adapter, "postgres", group))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)

    assert effect_problems(effects(pg), layout.event_ids, group) == []
    assert dedup_transactions(pg, group) == 40


async def test_an_on_batch_handler_gets_the_new_events_of_a_batch_in_one_call(
    case: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    adapter, backend = case
    topic = await topics("bulk", partitions=2)
    events = make_events(150, keys=20, partitions=2, seed=25)
    layout = await produce(kafka_bootstrap, topic, adjacent_duplicates(events, 5))
    calls: list[list[ConsumedEvent]] = []
    group = new_group()
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, backend))
    app.on_batch(topic)(bulk_effect_handler(adapter, backend.dialect, group, calls=calls))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)

    assert effect_problems(effects(backend), layout.event_ids, group) == []
    assert sum(len(c) for c in calls) == 150  # the duplicates never reached it
    assert max(len(c) for c in calls) > 1
    for call in calls:  # one partition's events per call, in offset order
        assert len({e.partition for e in call}) == 1
        assert [e.offset for e in call] == sorted(e.offset for e in call)


# --------------------------------------------------------------------------- revocation


def long_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumers whose group session outlasts the test's wait (30 s): a member that does not
    rejoin a rebalance is not dropped by the broker for missing heartbeats within it."""
    original = vars(consumer_module)["AIOKafkaConsumer"]

    def make(*args: Any, **kw: Any) -> Any:
        return original(*args, session_timeout_ms=30_000, heartbeat_interval_ms=1_000, **kw)

    monkeypatch.setattr(consumer_module, "AIOKafkaConsumer", make)


def assigned(running: RunningConsumer) -> int:
    kafka = running.consumer._kafka
    return len(kafka.assignment()) if kafka is not None else 0


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_rebalance_completes_while_the_database_is_held_down(
    adapter: str,
    pg: Backend,
    kafka_bootstrap: str,
    topics: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Consumer A holds both partitions and retries its records: its database is away (the
    gate refuses connections). B joins the group. A's revocation stops its retries instead
    of waiting for the database, so A rejoins at once and the two split the partitions
    while the database is still away (before, A stayed in its retries: the broker dropped
    it only after its session timeout, here 30 s, and B got both). Nothing is committed
    past an unapplied record; once the database is back, each event is applied once."""
    long_sessions(monkeypatch)
    topic = await topics("revoke-down", partitions=2)
    events = make_events(100, keys=20, partitions=2, seed=26)
    layout = await produce(kafka_bootstrap, topic, events)
    group = new_group()
    async with tcp_gate(urlsplit(pg.target).netloc.rpartition("@")[2]) as gate:  # closed

        def app_for(name: str) -> ConsumerApp:
            backend = through(gate, pg)
            database = (
                PsycopgAsync(backend.target, pool_timeout_s=1.0)  # a try fails within 1 s
                if adapter == "psycopg_async"
                else make_database(adapter, backend)
            )
            app = ConsumerApp(fast_settings(kafka_bootstrap, group, client_id=name), database)
            app.handler(topic)(effect_handler(adapter, "postgres", group, applied_by=name))
            return app

        async with running_consumer(app_for("a")) as a:

            async def a_retrying() -> bool:
                return int(a.stats.transient_retries) >= 2 and assigned(a) == 2

            await until(a_retrying, 60, "A retrying against the database", alive=a.check_alive)
            async with running_consumer(app_for("b")) as b:
                joined = time.monotonic()

                async def split() -> bool:
                    return assigned(a) == 1 and assigned(b) == 1

                await until(split, 25, "A and B holding a partition each", alive=b.check_alive)
                rebalance_s = time.monotonic() - joined
                assert int(a.stats.transient_retries) >= 2
                committed = await committed_offsets(kafka_bootstrap, group, topic)
                assert offset_problems(committed, layout, set()) == []
                await gate.open()
                await wait_committed(kafka_bootstrap, group, layout, alive=b.check_alive)

    print(f"rebalance with the database away: {rebalance_s:.1f}s")
    assert effect_problems(effects(pg), layout.event_ids, group) == []
