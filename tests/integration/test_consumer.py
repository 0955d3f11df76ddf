"""consumer_lib on real Kafka and real databases, in this process (and the CLI as a process).

Records are put on private topics the way the relay publishes them (event_id, event_type
and content-type headers), or emitted with producer_lib and published by an in-process
relay. Each handler writes one consumer_effects row through the session consumer_lib gives
it; that table has no unique constraint, so an event applied twice is two rows. Every
scenario ends with the group's committed offsets read back from the broker.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from consumer_lib import (
    ConsumedEvent,
    ConsumerApp,
    PsycopgAsync,
    TransientError,
)
from consumer_lib.consumer import MissingIdPolicy
from consumer_lib.database import is_transient
from producer_lib import Event, Outbox
from tests.conftest import TopicFactory
from tests.support.consumers import (
    ADAPTERS,
    ConsumerProcess,
    GroupOffsets,
    Outgoing,
    committed_offsets,
    consumer_env,
    dead_letters,
    effect_handler,
    effect_problems,
    effects,
    fast_settings,
    header,
    make_database,
    make_events,
    new_group,
    offset_problems,
    order_problems,
    prepare,
    private_backend,
    processed_ids,
    produce,
    relay_record,
    running_consumer,
    terminate_other_connections,
    wait_committed,
    with_duplicates,
)
from tests.support.db import Backend
from tests.support.ops import tcp_gate
from tests.support.processes import ROOT
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- adapters


async def test_each_adapter_applies_every_event_once_despite_duplicates(
    case: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    adapter, backend = case
    topic = await topics("adapters", partitions=3)
    events = make_events(300, keys=40, partitions=3, seed=1)
    # 40 copies after their originals: 35 on the same partition (a relay publishing a row
    # twice), 5 on another partition, where they race their original.
    records = with_duplicates(events, 40, seed=2, partitions=3, cross_partition=5)
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, backend))
    app.handler(topic, "OrderPlaced")(effect_handler(adapter, backend.dialect, group))

    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    found = effects(backend)
    assert effect_problems(found, layout.event_ids, group) == []
    assert order_problems(found) == []
    assert stats.processed == 300
    assert stats.duplicates == 40
    assert (stats.dead_lettered, stats.handler_failures, stats.skipped) == (0, 0, 0)
    assert processed_ids(backend, group) == layout.event_ids
    # The handler saw what was produced: key and payload of the same event.
    sent = {r.event_id: r for r in events}
    for e in found:
        assert e.event_id is not None
        original = sent[e.event_id]
        assert e.key == original.key
        assert f'"n":{e.n},' in (original.value or b"").decode()
        assert e.event_type == "OrderPlaced"
    assert await dead_letters(kafka_bootstrap, topic) == []


async def test_dedup_is_per_group_and_a_republished_topic_applies_nothing_twice(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    topic = await topics("regroup", partitions=2)
    events = make_events(100, keys=20, partitions=2, seed=3)
    layout = await produce(kafka_bootstrap, topic, events)
    first, second = new_group(), new_group()

    def app_for(group: str) -> ConsumerApp:
        app = ConsumerApp(fast_settings(kafka_bootstrap, group), PsycopgAsync(pg.target))
        app.handler(topic)(effect_handler("psycopg_async", "postgres", group))
        return app

    async with running_consumer(app_for(first)) as running:
        await wait_committed(kafka_bootstrap, first, layout, alive=running.check_alive)
    assert running.stats.processed == 100

    # Everything published again (a relay that lost its marks): the group applies nothing.
    layout = await produce(kafka_bootstrap, topic, events, layout)
    async with running_consumer(app_for(first)) as again:
        await wait_committed(kafka_bootstrap, first, layout, alive=again.check_alive)
    assert (again.stats.processed, again.stats.duplicates) == (0, 100)

    # Another group has its own dedup rows: it applies each event once, ignoring the copies.
    async with running_consumer(app_for(second)) as other:
        await wait_committed(kafka_bootstrap, second, layout, alive=other.check_alive)
    assert (other.stats.processed, other.stats.duplicates) == (100, 100)

    found = effects(pg)
    assert effect_problems(found, layout.event_ids, first) == []
    assert effect_problems(found, layout.event_ids, second) == []
    assert processed_ids(pg, first) == processed_ids(pg, second) == layout.event_ids


# --------------------------------------------------------------------------- the whole chain


def emit_orders(backend: Backend, topic: str, n: int, seed: int) -> tuple[list[str], list[str]]:
    """n committed events over 30 keys in transactions of 1-10, plus rolled-back ones.

    Returns (committed event_ids, rolled-back event_ids).
    """
    rng = random.Random(seed)
    outbox = Outbox()
    committed: list[str] = []
    rolled_back: list[str] = []
    while len(committed) < n:
        size = min(rng.randint(1, 10), n - len(committed))
        batch = [
            Event(topic, f"key-{rng.randrange(30)}", "OrderPlaced", {"n": len(committed) + j})
            for j in range(size)
        ]
        if rng.random() < 0.1:
            with pytest.raises(RuntimeError), sync_tx(backend, "driver") as conn:
                rolled_back += [str(e) for e in outbox.emit_batch(conn, batch)]
                raise RuntimeError("the service's transaction fails")
            continue
        with sync_tx(backend, "driver") as conn:
            committed += [str(e) for e in outbox.emit_batch(conn, batch)]
    return committed, rolled_back


async def test_producer_lib_to_relay_to_consumer_lib_applies_each_committed_event_once(
    backend: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """emit in the service's transaction -> relay -> Kafka -> consumer_lib, all real; the
    consumer's dedup table and effects live in the same database as the outbox."""
    prepare(backend)
    topic = await topics("chain", partitions=3)
    committed, rolled_back = emit_orders(backend, topic, 400, seed=4)
    group = new_group()
    adapter = "sqlalchemy_async"
    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, backend))
    app.handler(topic, "OrderPlaced")(effect_handler(adapter, backend.dialect, group))

    async with (
        running_consumer(app) as running,
        running_relay(relay_settings(backend, kafka_bootstrap, batch_size=100)) as relay,
    ):
        await wait_drained(backend, 60)
        # More while both run (from a thread: a blocked loop would stall both).
        more, more_rolled_back = await asyncio.to_thread(emit_orders, backend, topic, 100, 5)
        await wait_drained(backend, 60)
        expected = set(committed + more)

        async def all_applied() -> bool:
            return len(await asyncio.to_thread(effects, backend)) >= len(expected)

        await until(all_applied, 60, f"{len(expected)} effects", alive=running.check_alive)
    found = effects(backend)
    assert effect_problems(found, expected, group) == []
    assert not {e.event_id for e in found} & set(rolled_back + more_rolled_back)
    assert order_problems(found) == []
    assert relay.stats.published >= len(expected)
    assert running.stats.processed == len(expected)
    # What the service emitted is what the handler got: key, type and payload.
    assert Counter(e.n for e in found) == Counter(range(400)) + Counter(range(100))
    assert {e.event_type for e in found} == {"OrderPlaced"}
    assert processed_ids(backend, group) == expected


# --------------------------------------------------------------------------- failures


async def test_failed_attempts_roll_back_retry_reruns_then_dead_letter_and_go_on(
    case: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """A failing handler's transaction rolls back with its dedup row, so the retry really
    runs the handler again; after max_attempts the record goes to the dead-letter topic
    with where it came from and the error, and the records after it are applied. A
    transaction per record (batch=False); in batches: test_consumer_batches.py."""
    adapter, backend = case
    topic = await topics("fail")
    events = make_events(30, keys=5, seed=6)
    layout = await produce(kafka_bootstrap, topic, events)
    always, twice = events[10].event_id, events[20].event_id
    assert always is not None
    assert twice is not None
    failures: Counter[str] = Counter()

    def fail(event: ConsumedEvent) -> None:
        # After the effect row is written: the rollback must take it away again.
        eid = str(event.event_id)
        if eid == always or (eid == twice and failures[eid] < 2):
            failures[eid] += 1
            raise ValueError(f"boom {eid} attempt {failures[eid]}")

    calls: list[ConsumedEvent] = []
    group = new_group()
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, max_attempts=3, batch=False),
        make_database(adapter, backend),
    )
    app.handler(topic)(
        effect_handler(adapter, backend.dialect, group, after_write=fail, calls=calls)
    )
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    per_event = Counter(str(e.event_id) for e in calls)
    assert per_event[always] == 3
    assert per_event[twice] == 3  # two rolled back, the third committed
    assert stats.handler_failures == 5
    assert (stats.dead_lettered, stats.processed, stats.duplicates) == (1, 29, 0)
    expected = layout.event_ids - {always}
    found = effects(backend)
    assert effect_problems(found, expected, group) == []
    assert always not in processed_ids(backend, group)
    assert processed_ids(backend, group) == expected

    [dead] = await dead_letters(kafka_bootstrap, topic)
    original = events[10]
    assert dead.value == original.value
    assert dead.key == (original.key or "").encode()
    assert header(dead, "event_id") == always
    assert header(dead, "event_type") == "OrderPlaced"
    assert header(dead, "content-type") == "application/json"
    assert header(dead, "dlt.original.topic") == topic
    assert header(dead, "dlt.original.partition") == "0"
    assert header(dead, "dlt.original.offset") == "10"
    assert header(dead, "dlt.consumer.group") == group
    assert header(dead, "dlt.error.type") == "ValueError"
    assert f"boom {always} attempt 3" in header(dead, "dlt.error")


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_transient_errors_and_cut_connections_are_retried_without_limit(
    adapter: str, pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """TransientError and a connection cut mid-transaction (pg_terminate_backend) are
    retried without counting against max_attempts: applied once, nothing dead-lettered.
    A transaction per record (batch=False); in batches: test_consumer_batches.py."""
    topic = await topics("transient")
    events = make_events(40, keys=5, seed=7)
    layout = await produce(kafka_bootstrap, topic, events)
    flaky, cut_before, cut_after = (events[i].event_id for i in (5, 15, 25))
    seen: Counter[str] = Counter()

    def before(event: ConsumedEvent) -> None:
        eid = str(event.event_id)
        seen[eid] += 1
        if eid == flaky and seen[eid] <= 4:
            raise TransientError("a dependency is down")
        if eid == cut_before and seen[eid] == 1:
            assert terminate_other_connections(pg) >= 1

    def after(event: ConsumedEvent) -> None:
        if str(event.event_id) == cut_after and seen[str(event.event_id)] == 1:
            # The effect row is written; the commit will find the connection gone.
            assert terminate_other_connections(pg) >= 1

    group = new_group()
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, max_attempts=2, batch=False),
        make_database(adapter, pg),
    )
    app.handler(topic)(
        effect_handler(adapter, "postgres", group, before_write=before, after_write=after)
    )
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    assert seen[str(flaky)] == 5
    assert seen[str(cut_before)] >= 2
    assert seen[str(cut_after)] >= 2
    assert stats.transient_retries >= 6
    assert (stats.dead_lettered, stats.handler_failures, stats.processed) == (0, 0, 40)
    assert effect_problems(effects(pg), layout.event_ids, group) == []
    assert await dead_letters(kafka_bootstrap, topic) == []


async def test_psycopg_async_replaces_all_broken_idle_connections_after_one_failure(
    pg: Backend,
) -> None:
    """The pool does not test a connection on every checkout (a round trip per event);
    when a server restart has broken all its idle connections, the first transaction fails
    (transient, retried by the consumer) and the rest are replaced before the next one."""
    import psycopg

    db = PsycopgAsync(pg.target, max_connections=4)
    release = asyncio.Event()
    holding: list[object] = []

    async def hold(event: object, conn: object) -> None:
        holding.append(conn)
        await release.wait()

    try:
        # Four transactions at once, the first use from several tasks: four connections.
        busy = [asyncio.create_task(db.apply("g", str(uuid.uuid4()), hold, None)) for _ in "1234"]
        await until(lambda: len(holding) == 4, 30, "four transactions holding a connection each")
        release.set()
        assert await asyncio.gather(*busy) == [True] * 4
        assert terminate_other_connections(pg) == 4  # all idle in the pool now

        with pytest.raises(psycopg.OperationalError):
            await db.apply("g", str(uuid.uuid4()), nothing, None)
        for _ in range(8):  # without the sweep, the next three would draw a dead connection
            assert await db.apply("g", str(uuid.uuid4()), nothing, None)
    finally:
        await db.close()


async def test_psycopg_async_started_while_the_database_is_away_connects_once_it_is_back(
    pg: Backend,
) -> None:
    """A consumer may start before its database: each transaction fails as a transient
    error (retried by the consumer) until the server answers, and then the same
    PsycopgAsync works; its pool is never closed for good by a first failed connection."""
    import psycopg_pool

    server = urlsplit(pg.target).netloc.rpartition("@")[2]
    async with tcp_gate(server) as gate:  # refuses connections until it is opened
        db = PsycopgAsync(pg.target.replace(server, gate.address, 1), pool_timeout_s=1.0)

        async def apply() -> bool:
            return await db.apply("g", str(uuid.uuid4()), nothing, None)

        try:
            for _ in range(3):
                with pytest.raises(psycopg_pool.PoolTimeout) as away:
                    await apply()
                assert is_transient(away.value)
            await gate.open()

            async def applied() -> bool:
                try:
                    return await apply()
                except psycopg_pool.PoolTimeout:
                    return False

            await until(applied, 30, "a transaction once the database is back")
            assert await apply()
        finally:
            await db.close()


async def nothing(event: object, conn: object) -> None:
    return None


async def test_each_adapter_dedups_and_purges_only_rows_older_than_retention_counting_them(
    case: tuple[str, Backend],
) -> None:
    """apply records (group, event_id) once; purge deletes up to `limit` rows past the
    retention per call and returns how many it deleted, so the consumer knows to go on."""
    adapter, backend = case
    db = make_database(adapter, backend)
    group, other = new_group(), new_group()

    def still(event: object, session: object) -> None:
        return None

    try:
        old = [str(uuid.uuid4()) for _ in range(5)]
        for event_id in old:
            assert await db.apply(group, event_id, still, None)
        assert not await db.apply(group, old[0], still, None)  # a duplicate
        others = [str(uuid.uuid4()) for _ in range(2)]
        for event_id in others:
            assert await db.apply(other, event_id, still, None)
        backend.rewind(1.5)  # every row so far was processed 1.5 s earlier
        recent = str(uuid.uuid4())
        assert await db.apply(group, recent, still, None)
        assert [await db.purge(group, 1.0, 2) for _ in range(4)] == [2, 2, 1, 0]
        assert processed_ids(backend, group) == {recent}
        assert processed_ids(backend, other) == set(others)  # as old, but another group's
    finally:
        await db.close()


def poison_records(topic_events: list[Outgoing]) -> list[Outgoing]:
    """Good events with bad records between them: what each bad one is, in its key."""
    good = iter(topic_events)
    eid = str(uuid.uuid4())
    json_headers = (("event_type", b"OrderPlaced"), ("content-type", b"application/json"))
    return [
        next(good),
        Outgoing("bad-json", b'{"n": 1,', (("event_id", eid.encode()), *json_headers)),
        next(good),
        Outgoing(
            "bad-header",
            b"{}",
            (("event_id", str(uuid.uuid4()).encode()), ("x-tenant", b"\xff\xfe"), *json_headers),
        ),
        Outgoing("bad-id", b"{}", (("event_id", b"not-a-uuid"), *json_headers)),
        next(good),
        Outgoing("no-id", b'{"n": 1000}', json_headers),
        next(good),
        Outgoing("no-id", b'{"n": 1000}', json_headers),  # the same again: no dedup possible
        relay_record(str(uuid.uuid4()), "other-type", {"n": 2000}, event_type="OrderCancelled"),
        next(good),
    ]


@pytest.mark.parametrize(
    ("missing_event_id", "unhandled", "adapter", "dialect"),
    [
        ("dead_letter", "skip", "psycopg_async", "postgres"),
        ("skip", "skip", "psycopg_async", "postgres"),
        ("process", "dead_letter", "psycopg_async", "postgres"),
        ("process", "dead_letter", "sqlalchemy_sync", "mariadb"),
    ],
)
async def test_poison_records_go_to_the_dead_letter_topic_and_consumption_continues(
    missing_event_id: MissingIdPolicy,
    unhandled: Any,
    adapter: str,
    dialect: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kafka_bootstrap: str,
    topics: TopicFactory,
) -> None:
    backend = private_backend(request, dialect, tmp_path)
    topic = await topics("poison")
    good = make_events(5, keys=5, seed=8)
    layout = await produce(kafka_bootstrap, topic, poison_records(good))
    group = new_group()
    app = ConsumerApp(
        fast_settings(
            kafka_bootstrap, group, missing_event_id=missing_event_id, unhandled=unhandled
        ),
        make_database(adapter, backend),
    )
    app.handler(topic, "OrderPlaced")(effect_handler(adapter, backend.dialect, group))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    stats = running.stats

    dead = await dead_letters(kafka_bootstrap, topic)
    reasons = {(d.key or b"").decode(): header(d, "dlt.error") for d in dead}
    assert "not valid JSON" in reasons.pop("bad-json")
    assert "not UTF-8" in reasons.pop("bad-header")
    assert "not a UUID" in reasons.pop("bad-id")
    assert all(header(d, "dlt.error.type") == "PoisonRecord" for d in dead)
    found = effects(backend)
    good_ids = {str(e.event_id) for e in good}
    with_id = [e for e in found if e.event_id is not None]
    assert effect_problems(with_id, good_ids, group) == []
    no_id = [e for e in found if e.event_id is None]
    if missing_event_id == "dead_letter":
        assert reasons.pop("no-id") == "PoisonRecord: record has no event_id header"
        assert no_id == []
        assert stats.skipped == 1  # the unhandled type
    elif missing_event_id == "skip":
        assert no_id == []
        assert stats.skipped == 3
    else:
        # Processed without dedup: both copies applied, no processed_events row for them.
        assert [e.n for e in no_id] == [1000, 1000]
        assert "no handler for 'OrderCancelled'" in reasons.pop("other-type")
    assert reasons == {}
    assert processed_ids(backend, group) == good_ids
    assert stats.dead_lettered == len(dead)


# --------------------------------------------------------------------------- offsets


async def test_committed_offsets_never_pass_a_record_whose_effect_is_not_committed(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """Two probes, all the run long: inside the handler (before its commit), the group's
    committed offset must not be past the record; and a sampler that reads the committed
    offsets, then the effects, finds every record below each offset applied."""
    topic = await topics("offsets", partitions=3)
    records = with_duplicates(make_events(600, keys=60, partitions=3, seed=9), 60, seed=10)
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()
    inner = effect_handler("psycopg_async", "postgres", group, delay_s=0.002)
    in_handler: list[str] = []
    probes = 0

    async with GroupOffsets(kafka_bootstrap, group, topic) as offsets:

        async def handler(event: ConsumedEvent, conn: Any) -> None:
            nonlocal probes
            if event.offset % 5 == 0:
                probes += 1
                committed = (await offsets.read()).get(event.partition, 0)
                if committed > event.offset:
                    in_handler.append(f"p{event.partition}: {committed} > {event.offset}")
            await inner(event, conn)

        app = ConsumerApp(
            fast_settings(kafka_bootstrap, group, max_records=25), PsycopgAsync(pg.target)
        )
        app.handler(topic)(handler)
        samples: list[dict[int, int]] = []
        problems: list[str] = []
        async with running_consumer(app) as running:
            while len(samples) < 500:
                running.check_alive()
                committed = await offsets.read()
                applied = {e.event_id for e in await asyncio.to_thread(effects, pg)}
                problems += offset_problems(committed, layout, {e for e in applied if e})
                samples.append(committed)
                if all(committed.get(p, 0) >= end for p, end in layout.ends().items()):
                    break
                await asyncio.sleep(0.02)
            stats = running.stats

    assert problems == []
    assert in_handler == []
    assert probes >= 100
    distinct = {tuple(sorted(s.items())) for s in samples}
    assert len(distinct) >= 5, f"too few distinct commits observed: {distinct}"
    assert samples[-1] == layout.ends()
    assert stats.commits >= 10
    assert effect_problems(effects(pg), layout.event_ids, group) == []


# --------------------------------------------------------------------------- rebalance


async def test_two_consumers_share_a_group_and_hand_over_on_graceful_stop(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    topic = await topics("share", partitions=6)
    records = with_duplicates(make_events(900, keys=90, partitions=6, seed=11), 50, seed=12)
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()

    def app_for(name: str) -> ConsumerApp:
        app = ConsumerApp(
            fast_settings(kafka_bootstrap, group, max_records=20), PsycopgAsync(pg.target)
        )
        app.handler(topic)(
            effect_handler("psycopg_async", "postgres", group, applied_by=name, delay_s=0.004)
        )
        return app

    async def applied() -> int:
        return len(await asyncio.to_thread(effects, pg))

    async with running_consumer(app_for("a")) as a:
        await until(lambda: _at_least(applied, 100), 30, "a's first effects", alive=a.check_alive)
        async with running_consumer(app_for("b")) as b:
            await until(lambda: _at_least(applied, 400), 60, "400 effects", alive=b.check_alive)
            await a.stop()
            # a committed what it applied before leaving: no offset past a missing effect.
            committed = await committed_offsets(kafka_bootstrap, group, topic)
            done = {e.event_id for e in effects(pg) if e.event_id}
            assert offset_problems(committed, layout, done) == []
            await wait_committed(kafka_bootstrap, group, layout, alive=b.check_alive)

    found = effects(pg)
    assert effect_problems(found, layout.event_ids, group) == []
    by = Counter(e.applied_by for e in found)
    assert by["a"] >= 100, by
    assert by["b"] >= 100, by
    assert a.stats.processed + b.stats.processed == 900
    assert order_problems(found) == []


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


@pytest.mark.parametrize("adapter", ["psycopg_async", "sqlalchemy_async", "sqlalchemy_asyncpg"])
async def test_stop_gives_a_stuck_handler_shutdown_grace_s_then_leaves_its_record(
    adapter: str, pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """stop() (SIGTERM in the CLI) waits shutdown_grace_s for the records in flight, then
    cancels them: the stuck record rolls back, its offset stays uncommitted, and the next
    consumer of the group applies it and the rest exactly once."""
    topic = await topics("grace")
    events = make_events(10, keys=3, seed=14)
    layout = await produce(kafka_bootstrap, topic, events)
    stuck = events[4].event_id
    entered = asyncio.Event()

    async def hang(event: ConsumedEvent) -> None:
        entered.set()
        await asyncio.sleep(3600)

    group = new_group()
    real = effect_handler(adapter, "postgres", group)

    async def handler(event: ConsumedEvent, session: Any) -> None:
        await real(event, session)
        if str(event.event_id) == stuck:
            await hang(event)  # the effect row is written, the transaction still open

    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, shutdown_grace_s=1.0), make_database(adapter, pg)
    )
    app.handler(topic)(handler)
    async with running_consumer(app) as running:
        await asyncio.wait_for(entered.wait(), 30)
        started = asyncio.get_running_loop().time()
        await running.stop(timeout=15)
        stopped_in = asyncio.get_running_loop().time() - started
    assert stopped_in < 10, f"stop took {stopped_in:.1f}s with shutdown_grace_s=1"
    # Nothing past the stuck record (in a batch with it, the records before it rolled back too).
    assert (await committed_offsets(kafka_bootstrap, group, topic)).get(0, 0) <= 4
    assert stuck not in processed_ids(pg, group)
    assert stuck not in {e.event_id for e in effects(pg)}

    app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database(adapter, pg))
    app.handler(topic)(real)
    async with running_consumer(app) as again:
        await wait_committed(kafka_bootstrap, group, layout, alive=again.check_alive)
    assert effect_problems(effects(pg), layout.event_ids, group) == []


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    "target",
    [
        "tests.support.no_such_module:build",
        "tests.support.consumer_app:no_such_attribute",
        "tests.support.consumer_app",
        "tests.support.consumer_app:not_an_app",
    ],
)
def test_cli_exits_2_on_a_bad_app_path(target: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "consumer_lib.cli", "run", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "outbox-consumer:" in result.stderr


async def test_cli_runs_an_app_and_stops_with_exit_0_on_sigterm(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory, tmp_path: Path
) -> None:
    topic = await topics("cli", partitions=2)
    layout = await produce(kafka_bootstrap, topic, make_events(200, partitions=2, seed=13))
    group = new_group()
    env = consumer_env(pg, kafka_bootstrap, topics=[topic], group=group, name="cli")
    proc = ConsumerProcess(env, tmp_path / "consumer.log", name="cli")
    try:
        await proc.wait_log("consumer started", 60)
        await wait_committed(kafka_bootstrap, group, layout, alive=None)
        assert proc.running
        proc.signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.running:
            proc.kill()
    assert code == 0, proc.log()[-3000:]
    assert "consumer stopped" in proc.log()
    assert effect_problems(effects(pg), layout.event_ids, group) == []
