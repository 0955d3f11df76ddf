"""consumer_lib's exactly-once guarantee under faults: real Postgres, real Kafka, consumers
as `python -m consumer_lib.cli run tests.support.consumer_app:build` processes.

Every scenario ends with the same verdict: exactly one consumer_effects row per event_id
(the table has no unique constraint, so a second application would show), none missing,
nothing dead-lettered, and the group's committed offsets at the end of every partition.
Along the way, committed offsets are checked against the effects committed in the
database: no offset may pass a record whose effect is not committed.

The database outage runs only where scripts/services manages the servers
(OUTBOX_SERVICES_MANAGED=1, set by scripts/test) and skips elsewhere.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TopicFactory
from tests.support.consumers import (
    ADAPTERS,
    ASSIGNED,
    ChunkGate,
    ConsumerFleet,
    ConsumerProcess,
    Effect,
    Layout,
    committed_offsets,
    consumer_env,
    consumer_topics,
    effect_problems,
    effects,
    feed,
    make_events,
    new_group,
    offset_problems,
    order_problems,
    processed_ids,
    produce,
    with_duplicates,
    with_effects,
)
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.services import managed_services, services
from tests.support.waits import until

pytestmark = pytest.mark.integration

# The broker's minimum: a killed consumer leaves the group 6 s after its last heartbeat.
SESSION_TIMEOUT_MS = 6000
NOT_MANAGED = (
    "stops and starts Postgres: needs OUTBOX_SERVICES_MANAGED=1 (scripts/test sets it when "
    "scripts/services runs the servers); skipped so that a server this run does not own is "
    "never stopped"
)


@pytest.fixture
def pg(pg: Backend) -> Backend:
    return with_effects(pg)


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[TopicFactory]:
    async with consumer_topics(kafka_bootstrap) as make:
        yield make


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[ConsumerFleet]:
    consumers = ConsumerFleet(tmp_path)
    yield consumers
    consumers.kill_all()


async def read_effects(backend: Backend, **kw: Any) -> list[Effect]:
    return await asyncio.to_thread(effects, backend, **kw)


async def wait_exit(proc: ConsumerProcess, timeout: float) -> int | None:
    """The exit code, or None if the process still runs after timeout."""
    try:
        return await asyncio.to_thread(proc.proc.wait, timeout)
    except subprocess.TimeoutExpired:
        return None


async def terminate(proc: ConsumerProcess, timeout: float = 60) -> int:
    """SIGTERM; a consumer must finish its records, commit, leave the group and exit 0.

    Only once it runs: a SIGTERM before the CLI installed its handler just ends the process.
    """
    await proc.wait_log("consumer started", 60)
    proc.signal(15)
    code = await wait_exit(proc, timeout)
    assert code == 0, f"{proc.name} exited {code} after SIGTERM:\n{proc.log()[-3000:]}"
    proc.wait(5)
    return code


async def kill(proc: ConsumerProcess) -> None:
    proc.signal(9)
    await wait_exit(proc, 30)
    proc.wait(5)


async def wait_all_committed(
    bootstrap: str, group: str, layout: Layout, fleet: ConsumerFleet, timeout: float
) -> None:
    want = layout.ends()

    async def reached() -> bool:
        got = await committed_offsets(bootstrap, group, layout.topic)
        return all(got.get(p, 0) >= end for p, end in want.items())

    def alive() -> None:
        assert fleet.running(), f"no consumer running:\n{fleet.logs()}"

    await until(reached, timeout, f"offsets {want} committed", interval=0.5, alive=alive)


def applied_but_uncommitted(found: list[Effect], committed: dict[int, int]) -> int:
    """Effects committed in the database whose record's offset is not committed yet: what a
    consumer dying now leaves to dedup (the 'between DB commit and offset commit' state)."""
    return sum(1 for e in found if e.offset >= committed.get(e.partition, 0))


def final_verdict(
    pg: Backend, layout: Layout, group: str, found: list[Effect], dead: list[Any]
) -> None:
    assert effect_problems(found, layout.event_ids, group) == []
    assert processed_ids(pg, group) == layout.event_ids
    assert dead == [], f"{len(dead)} records dead-lettered"


# --------------------------------------------------------------------------- (a) SIGKILL


@dataclass(frozen=True)
class Kill:
    where: str  # external | external_early | in_handler | before_offset_commit | ...
    slow_commit: bool = False


def kill_plan(kills: int, rng: random.Random) -> list[Kill]:
    """Crash points for each run: hooks for the three places that matter, at least twice
    each, the rest SIGKILL from outside at a random moment (some with slow offset commits
    to widen the window between the database commit and the offset commit)."""
    hooks = max(2, kills // 6)
    plan = [Kill("in_handler")] * hooks
    plan += [Kill("before_offset_commit")] * hooks
    plan += [Kill("after_offset_commit")] * max(2, kills // 8)
    plan += [Kill("external_early")] * max(1, kills // 15)
    rest = kills - len(plan)
    plan += [Kill("external", slow_commit=i % 3 == 0) for i in range(max(rest, 0))]
    rng.shuffle(plan)
    return plan


@pytest.mark.slow
@pytest.mark.timeout(2400)
async def test_sigkill_at_random_points_applies_every_event_exactly_once(
    pg: Backend,
    kafka_bootstrap: str,
    topics: TopicFactory,
    fleet: ConsumerFleet,
    full_size: bool,
) -> None:
    kills = 64 if full_size else 16
    count = 10_000 if full_size else 2000  # enough that most kills find work in progress
    partitions = 3
    rng = random.Random(40)
    topic = await topics("sigkill", partitions=partitions)
    events = make_events(count, keys=200, partitions=partitions, seed=41)
    records = with_duplicates(
        events, count // 10, seed=42, partitions=partitions, cross_partition=count // 100
    )
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()
    plan = kill_plan(kills, rng)

    def env(name: str, step: Kill | None) -> dict[str, str]:
        crash = None
        if step is not None and step.where == "in_handler":
            crash = f"in_handler:{rng.randint(1, 150)}"
        elif step is not None and step.where.endswith("offset_commit"):
            crash = f"{step.where}:{rng.randint(1, 8)}"
        return consumer_env(
            pg,
            kafka_bootstrap,
            topics=[topic],
            group=group,
            name=name,
            adapter=ADAPTERS[len(fleet.procs) % len(ADAPTERS)],
            session_timeout_ms=SESSION_TIMEOUT_MS,
            handler_delay_s=0.01,
            max_records=rng.choice([10, 50, 200]),
            crash=crash,
            slow_commit_s=0.3 if step is not None and step.slow_commit else None,
        )

    problems: list[str] = []
    landed: Counter[str] = Counter()
    pending_at_kill: list[int] = []  # applied in the DB, offset not committed
    deadline = time.monotonic() + kills * 30 + 60
    for i, step in enumerate(plan):
        assert time.monotonic() < deadline, f"only {i} kills in the time allowed"
        proc = fleet.start(env(f"k{i:02d}", step), f"k{i:02d}")
        if step.where == "external_early":
            await asyncio.sleep(rng.uniform(0.2, 3.0))  # starting up, joining, or working
        else:
            await proc.wait_log(ASSIGNED, 60)
        if step.where.startswith("external"):
            await asyncio.sleep(rng.uniform(0.05, 1.5))
            assert proc.running, f"{proc.name} exited by itself:\n{proc.log()[-3000:]}"
            await kill(proc)
            landed[step.where + (" slow-commit" if step.slow_commit else "")] += 1
        else:
            code = await wait_exit(proc, 20)
            if code is None:  # the hook was not reached (little left to do): kill from outside
                await kill(proc)
                landed["external (hook not reached)"] += 1
            else:
                assert code == 9, f"{proc.name} exited {code}:\n{proc.log()[-3000:]}"
                assert f"CONSUMER-TEST-CRASH {step.where}" in proc.log()
                landed[step.where] += 1
        # The consumer is dead: its committed offsets and effects are final for this moment.
        committed = await committed_offsets(kafka_bootstrap, group, topic)
        found = await read_effects(pg)
        applied = {e.event_id for e in found if e.event_id}
        problems += [
            f"after kill {i} ({step}): {p}" for p in offset_problems(committed, layout, applied)
        ]
        twice = [e for e, c in Counter(e.event_id for e in found).items() if c > 1]
        problems += [f"after kill {i} ({step}): {e} applied twice" for e in twice]
        pending_at_kill.append(applied_but_uncommitted(found, committed))

    final = fleet.start(env("final", None), "final")
    await final.wait_log(ASSIGNED, 60)  # up, whether or not anything is left to do
    await wait_all_committed(kafka_bootstrap, group, layout, fleet, 240)
    await terminate(final)

    found = await read_effects(pg)
    assert problems == []
    final_verdict(pg, layout, group, found, await read_topic(kafka_bootstrap, f"{topic}.DLT"))
    assert order_problems(found) == []
    assert sum(landed.values()) == kills >= 15
    for where in ("in_handler", "before_offset_commit", "after_offset_commit"):
        assert landed[where] >= 1, landed
    # Kills landed while records were applied but not yet committed to Kafka: the replay
    # that followed was absorbed by dedup, not applied again.
    assert sum(1 for n in pending_at_kill if n) >= kills // 4, pending_at_kill
    by = Counter(e.applied_by for e in found)
    assert len(by) >= kills // 2, by
    print(
        f"kills {dict(landed)}; records {layout.records} for {len(layout.event_ids)} events; "
        f"applied-but-uncommitted at each kill {pending_at_kill}; effects by run {dict(by)}"
    )


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_sigkill_mid_batch_leaves_nothing_of_the_batch_then_applies_each_event_once(
    adapter: str,
    pg: Backend,
    kafka_bootstrap: str,
    topics: TopicFactory,
    fleet: ConsumerFleet,
) -> None:
    """SIGKILL (the process kills itself) at the 57th handler call, in the middle of a batch
    of up to 200 records: the batch's transaction never commits, so none of the handler
    calls before it in that batch left an effect (a transaction per record would have left
    56). A second consumer then applies every event exactly once: one business row per
    event_id."""
    topic = await topics("sigkill-batch")
    events = make_events(300, keys=30, seed=43)
    layout = await produce(kafka_bootstrap, topic, with_duplicates(events, 30, seed=44))
    group = new_group()

    def env(name: str, crash: str | None) -> dict[str, str]:
        return consumer_env(
            pg,
            kafka_bootstrap,
            topics=[topic],
            group=group,
            name=name,
            adapter=adapter,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            max_records=200,
            crash=crash,
        )

    killed = fleet.start(env("killed", "in_handler:57"), "killed")
    code = await wait_exit(killed, 120)
    assert code == 9, f"killed exited {code}:\n{killed.log()[-3000:]}"
    assert "CONSUMER-TEST-CRASH in_handler" in killed.log()
    found = await read_effects(pg)
    assert len(found) < 56, f"{len(found)} effects: the killed batch committed a part"
    committed = await committed_offsets(kafka_bootstrap, group, topic)
    assert offset_problems(committed, layout, {e.event_id for e in found if e.event_id}) == []

    final = fleet.start(env("final", None), "final")
    await final.wait_log(ASSIGNED, 60)
    await wait_all_committed(kafka_bootstrap, group, layout, fleet, 120)
    await terminate(final)
    found = await read_effects(pg)
    final_verdict(pg, layout, group, found, await read_topic(kafka_bootstrap, f"{topic}.DLT"))
    assert order_problems(found) == []


# --------------------------------------------------------------------------- (b) join/leave


class OffsetSampler:
    """Reads the group's committed offsets, then the effects, over and over; every sample
    must find each record below a committed offset applied. Runs as a task."""

    def __init__(self, bootstrap: str, group: str, layout: Layout, pg: Backend) -> None:
        self.bootstrap, self.group, self.layout, self.pg = bootstrap, group, layout, pg
        self.samples = 0
        self.problems: list[str] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                committed = await committed_offsets(self.bootstrap, self.group, self.layout.topic)
                found = await read_effects(self.pg)
            except Exception:  # the database or the broker briefly away: sample again
                await asyncio.sleep(0.5)
                continue
            applied = {e.event_id for e in found if e.event_id}
            self.problems += offset_problems(committed, self.layout, applied)
            self.samples += 1
            await asyncio.sleep(0.3)

    def stop(self) -> None:
        self._stop.set()


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_consumers_joining_and_leaving_apply_every_event_exactly_once(
    pg: Backend,
    kafka_bootstrap: str,
    topics: TopicFactory,
    fleet: ConsumerFleet,
    full_size: bool,
) -> None:
    partitions = 6
    count = 9000 if full_size else 3000
    changes = 24 if full_size else 8
    rng = random.Random(50)
    topic = await topics("members", partitions=partitions)
    events = make_events(count, keys=300, partitions=partitions, seed=51)
    records = with_duplicates(
        events, count // 10, seed=52, partitions=partitions, cross_partition=count // 100
    )
    group = new_group()
    layout = Layout(topic)
    # Production goes on through every membership change. Each change releases its share
    # of the records once its newcomer holds partitions, so a slow machine cannot run the
    # feed dry before the last newcomers join and leave them nothing to apply.
    chunk = 100
    chunks = -(-len(records) // chunk)
    gate = ChunkGate(chunks // (changes + 1))
    feeder = asyncio.create_task(
        feed(kafka_bootstrap, topic, records, layout, chunk=chunk, pause_s=0.3, gate=gate)
    )
    sampler = OffsetSampler(kafka_bootstrap, group, layout, pg)
    sampling = asyncio.create_task(sampler.run())
    serial = 0

    def start() -> ConsumerProcess:
        nonlocal serial
        serial += 1
        name = f"c{serial}"
        env = consumer_env(
            pg,
            kafka_bootstrap,
            topics=[topic],
            group=group,
            name=name,
            adapter=ADAPTERS[serial % len(ADAPTERS)],
            session_timeout_ms=SESSION_TIMEOUT_MS,
            handler_delay_s=0.005,
            max_records=50,
        )
        return fleet.start(env, name)

    history: list[str] = []
    try:
        for _ in range(3):
            start()
        await fleet.running()[0].wait_log(ASSIGNED, 60)
        deadline = time.monotonic() + changes * 40 + 60
        for step in range(changes):
            assert time.monotonic() < deadline, f"only {step} membership changes in time"
            await asyncio.sleep(rng.uniform(1.5, 3.5))
            if step % 2 == 0:
                # SIGTERM before the CLI installed its handler would just kill the process.
                started = await until(
                    _started(fleet), 60, "a consumer that has started", interval=0.1
                )
                leaving = rng.choice(started)
                await terminate(leaving)
                history.append(f"SIGTERM {leaving.name}")
            else:
                leaving = rng.choice(fleet.running())
                await kill(leaving)
                history.append(f"SIGKILL {leaving.name}")
            newcomers = []
            while len(fleet.running()) < 3:
                newcomers.append(start())
                history.append(f"start {newcomers[-1].name}")
            for proc in newcomers:
                await proc.wait_log(ASSIGNED, 60)
            await gate.open_to((step + 2) * chunks // (changes + 1))
        await gate.open_to(chunks)
        await asyncio.wait_for(feeder, 300)
        await wait_all_committed(kafka_bootstrap, group, layout, fleet, 240)
    finally:
        sampler.stop()
        await asyncio.wait_for(sampling, 30)
        if not feeder.done():
            feeder.cancel()
    for proc in fleet.running():
        await terminate(proc)

    found = await read_effects(pg)
    final_verdict(pg, layout, group, found, await read_topic(kafka_bootstrap, f"{topic}.DLT"))
    assert sampler.problems == []
    assert sampler.samples >= 20
    assert order_problems(found) == []
    by = Counter(e.applied_by for e in found)
    assert len(by) >= changes // 2 + 2, by
    revoked = sum("partitions revoked" in p.log() for p in fleet.procs)
    assert revoked >= 3, "too few rebalances seen by the consumers"
    print(
        f"{'; '.join(history)}; records {layout.records} for {len(layout.event_ids)} events; "
        f"effects by consumer {dict(by)}; offset samples {sampler.samples}"
    )


# --------------------------------------------------------------------------- (c) database down


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(900)
async def test_database_down_for_10s_commits_no_offset_past_unapplied_records_and_resumes(
    pg: Backend,
    kafka_bootstrap: str,
    topics: TopicFactory,
    fleet: ConsumerFleet,
) -> None:
    """One consumer per database adapter; Postgres stops for 10 s while records keep
    arriving. No offset committed during the outage may pass a record whose effect was not
    committed before it; the same processes carry on by themselves afterwards."""
    if not managed_services():
        pytest.skip(NOT_MANAGED)
    partitions = 6
    topic = await topics("dbdown", partitions=partitions)
    events = make_events(3000, keys=300, partitions=partitions, seed=60)
    records = with_duplicates(events, 300, seed=61, partitions=partitions, cross_partition=30)
    group = new_group()
    layout = Layout(topic)
    await produce(kafka_bootstrap, topic, records[:600], layout)
    for adapter in ADAPTERS:
        fleet.start(
            consumer_env(
                pg,
                kafka_bootstrap,
                topics=[topic],
                group=group,
                name=adapter,
                adapter=adapter,
                handler_delay_s=0.005,
                max_records=50,
                backoff_max_s=2.0,
            ),
            adapter,
        )
    consumers = list(fleet.procs)
    for proc in consumers:
        await proc.wait_log(ASSIGNED, 60)
    await until(
        lambda: _effects_at_least(pg, 300), 60, "300 effects before the outage", interval=0.2
    )
    feeder = asyncio.create_task(
        feed(kafka_bootstrap, topic, records[600:], layout, chunk=100, pause_s=0.5)
    )
    during: list[dict[int, int]] = []
    try:
        # Blocking calls on purpose: Postgres is started again even if the test is stopped.
        services("down", "--only", "postgres")
        try:
            went_down = dt.datetime.now(dt.UTC)
            outage_end = time.monotonic() + 10
            while time.monotonic() < outage_end:
                during.append(await committed_offsets(kafka_bootstrap, group, topic))
                for proc in consumers:
                    assert proc.running, f"{proc.name} died:\n{proc.log()[-3000:]}"
                await asyncio.sleep(0.5)
        finally:
            services("up", "--only", "postgres")
        came_back = time.monotonic()
        at_outage = len(await read_effects(pg, before=went_down))
        await until(lambda: _effects_at_least(pg, at_outage + 1), 120, "an effect after the outage")
        resumed_in = time.monotonic() - came_back
        await asyncio.wait_for(feeder, 120)
        await wait_all_committed(kafka_bootstrap, group, layout, fleet, 180)
        caught_up_in = time.monotonic() - came_back
    finally:
        if not feeder.done():
            feeder.cancel()
    for proc in consumers:
        assert proc.running, f"{proc.name} stopped:\n{proc.log()[-3000:]}"
        await terminate(proc)

    # No effect can be committed while the database is down: the effects written before it
    # went down are all that any offset committed during the outage may cover.
    before = {e.event_id for e in await read_effects(pg, before=went_down) if e.event_id}
    problems = [p for sample in during for p in offset_problems(sample, layout, before)]
    assert problems == []
    assert len(during) >= 10
    found = await read_effects(pg)
    final_verdict(pg, layout, group, found, await read_topic(kafka_bootstrap, f"{topic}.DLT"))
    assert len(before) < len(layout.event_ids)
    by = Counter(e.applied_by for e in found if e.event_id not in before)
    assert set(by) == set(ADAPTERS), f"not every consumer resumed: {by}"
    # PsycopgAsync may ride out the outage waiting in its pool (up to 30 s) without an error.
    transient = {p.name: len(re.findall("transient failure", p.log())) for p in consumers}
    assert any(transient.values()), f"no consumer noticed the outage: {transient}"
    print(
        f"effects before the outage {len(before)}, after {len(found)}; offsets sampled during "
        f"it {len(during)}; first effect {resumed_in:.1f}s and all caught up (production "
        f"included) {caught_up_in:.1f}s after Postgres came back; "
        f"transient retries logged {transient}; applied after the outage by {dict(by)}"
    )


def _started(fleet: ConsumerFleet) -> Callable[[], Awaitable[list[ConsumerProcess]]]:
    async def check() -> list[ConsumerProcess]:
        return [p for p in fleet.running() if "consumer started" in p.log()]

    return check


async def _effects_at_least(pg: Backend, n: int) -> bool:
    return len(await read_effects(pg)) >= n
