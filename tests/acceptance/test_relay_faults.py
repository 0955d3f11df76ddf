"""The relay's guarantees under faults, on real Postgres and real Kafka, relays as processes.

Each scenario commits events (writer threads that remember what committed, what rolled
back and what was lost at COMMIT) while relays run as `python -m relay.cli run`
subprocesses configured by OUTBOX_* variables, injects a fault, and judges the topic as a
deduplicating consumer would: every committed event delivered, nothing else, per-key
order by first occurrence. Every relay change to an outbox row is audited with the
writer's replica id and the lease holder of that moment (fencing). The scenarios that take
`db` run on Postgres and on MariaDB (writers there emit through SQLAlchemy on PyMySQL).

Scenarios that stop the broker or the database run only where scripts/services manages
them (OUTBOX_SERVICES_MANAGED=1, set by scripts/test) and skip elsewhere.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from producer_lib import Event, Outbox
from tests.conftest import TopicFactory
from tests.support.db import Backend, mariadb_backend, postgres_backend, sqlite_backend
from tests.support.faults import (
    RelayFleet,
    Writers,
    audit_violations,
    delivery_problems,
    fetch,
    install_settle_audit,
    judge_log,
    leases,
    named_relay_env,
    scalar,
    service_down,
    settled_by,
    wait_split,
)
from tests.support.kafka import read_topic
from tests.support.ops import ops_port_in, scrape
from tests.support.processes import ROOT
from tests.support.relay import (
    expected_from_db,
    judge,
    judge_topic,
    relay_env,
)
from tests.support.services import managed_services
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration

NOT_MANAGED = (
    "stops and starts a server: needs OUTBOX_SERVICES_MANAGED=1 (scripts/test sets it when "
    "scripts/services runs Postgres and Kafka); skipped so that servers this run does not own "
    "are never stopped"
)


@pytest.fixture
def pg(pg: Backend) -> Backend:
    """A private, migrated Postgres database with the settle audit installed."""
    install_settle_audit(pg)
    return pg


@pytest.fixture(params=["postgres", "mariadb"])
def db(request: pytest.FixtureRequest) -> Backend:
    """A private, migrated database of each kind with the settle audit installed: the
    scenario runs once on Postgres and once on MariaDB."""
    if request.param == "postgres":
        backend = postgres_backend(request.getfixturevalue("migrated_pg_url"))
    else:
        backend = mariadb_backend(request.getfixturevalue("mariadb_url"))
        backend.migrate()
    install_settle_audit(backend)
    return backend


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RelayFleet]:
    relays = RelayFleet(tmp_path)
    yield relays
    relays.kill_all()


# A kill round's time: a start, the killed one's leases expiring (2 s), a takeover and up
# to 2.5 s of work. 8 s was enough on a quiet machine; 18 of 20 rounds fitted in it at a
# load above 10. The writers run that long, so they never stop before the last kill.
PER_KILL_S = 12
# The relay's log lines for a Kafka outage retried: a batch without acks, or the
# producer's recreation after a fatal error (relay/pipeline/loop.py's PublisherKeeper).
KAFKA_RETRIED = re.compile(r"(batch|kafka producer recreate) failed; retrying")


def warnings_in(log: str) -> str:
    """A relay log's warning and error lines (tracebacks left out), the last ones."""
    lines = [ln[:200] for ln in log.splitlines() if " WARNING " in ln or " ERROR " in ln]
    return "\n".join(lines[-30:])


def require_managed_services() -> None:
    if not managed_services():
        pytest.skip(NOT_MANAGED)


def parked_rows(backend: Backend) -> list[tuple[Any, ...]]:
    return backend.fetch("outbox_parked")


def assert_clean(verdict_problems: list[str], backend: Backend, fleet: RelayFleet) -> None:
    assert verdict_problems == [], f"{verdict_problems}\n{fleet.logs()}"
    violations = audit_violations(backend)
    assert violations == [], f"rows settled without the lease: {violations[:5]}"


async def publishing(backend: Backend, names: list[str], writers: Writers) -> None:
    """Until each named relay has settled more rows and writers have committed more
    events: traffic flows through the fleet as it now is."""
    settled, committed = settled_by(backend), writers.committed

    def flowing() -> bool:
        now = settled_by(backend)
        more = all(now.get(n, 0) > settled.get(n, 0) for n in names)
        return more and writers.committed > committed + 20

    await until(flowing, 60, f"{names} to settle more rows", blocking=True)


def stop_all(fleet: RelayFleet) -> dict[str, int]:
    """SIGTERM every relay still running; each must drain and exit 0."""
    codes = {n: p.terminate(60) for n, p in fleet.procs.items() if p.proc.poll() is None}
    assert all(c == 0 for c in codes.values()), f"exit codes {codes}\n{fleet.logs()}"
    return codes


# --------------------------------------------------------------------------- 1. replicas


async def test_replicas_rebalance_and_deliver_everything_in_order(
    db: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    topic = await new_topic("replicas", partitions=4)

    def start(name: str) -> None:
        fleet.start(name, named_relay_env(db, kafka_bootstrap, name, batch_size=100))

    splits: list[dict[str | None, int]] = []
    with Writers(db, topic, threads=2, keys=100, seed=1, pause_between_s=0.02) as writers:
        start("r1")
        splits.append((await wait_split(db, ["r1"])).split())
        await writers.wait_committed(200)
        start("r2")
        start("r3")
        three = await wait_split(db, ["r1", "r2", "r3"])
        splits.append(three.split())
        await publishing(db, ["r1", "r2", "r3"], writers)
        assert fleet.procs["r2"].terminate(60) == 0, fleet.procs["r2"].log()
        two = await wait_split(db, ["r1", "r3"])
        splits.append(two.split())
        moved = [s for s, o in three.owners.items() if o == "r2"]
        # r2's shards were released and taken over: a new token on each.
        assert all(two.tokens[s] > three.tokens[s] for s in moved), (three.tokens, two.tokens)
        start("r4")
        splits.append((await wait_split(db, ["r1", "r3", "r4"])).split())
        await publishing(db, ["r1", "r3", "r4"], writers)
        log = writers.stop()
    await fleet.drained(db, 60)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 1000, "too little traffic to prove anything"
    assert log.rolled_back, "no transaction rolled back"
    assert_clean(delivery_problems(verdict, log), db, fleet)
    # Every replica worked shards during the run, as the lease table said.
    assert set(settled_by(db)) == {"r1", "r2", "r3", "r4"}, settled_by(db)
    # Graceful hand-overs finish the batch before releasing: duplicates only after a lost lease.
    if verdict.duplicates:
        assert "lease lost" in fleet.logs(), f"{verdict.duplicates} duplicates without a lost lease"
    print(f"splits {splits}; committed {len(log.committed)}; duplicates {verdict.duplicates}")


# --------------------------------------------------------------------------- 2. SIGKILL


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_sigkill_at_random_points_loses_nothing(
    db: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    fleet: RelayFleet,
    full_size: bool,
) -> None:
    # MariaDB's CI run is shorter (each kill waits out a lease); the chaos run kills there too.
    kills = 200 if full_size else 20 if db.dialect == "postgres" else 8
    batch_size = 50
    topic = await new_topic("sigkill", partitions=3)
    rng = random.Random(20)

    def env(name: str) -> dict[str, str]:
        # A new process is a new replica: it waits for the killed one's leases to expire.
        # retention=keep with a retention of 2 s: the purge round drops and makes
        # one-second partitions of outbox_published (on MariaDB, a plain table: deletes
        # its old rows) five times a second through the kills.
        return named_relay_env(
            db,
            kafka_bootstrap,
            name,
            batch_size=batch_size,
            lease_ttl_s=2.0,
            retention="keep",
            retention_period_s=2.0,
            purge_interval_s=0.2,
        )

    started = time.time()
    killed: list[str] = []
    with Writers(
        db,
        topic,
        threads=2,
        keys=100,
        seed=2,
        pause_between_s=0.02,
        max_events=kills * 2000,  # never reached at this rate: writers run through every kill
        max_seconds=kills * PER_KILL_S + 120,
    ) as writers:
        deadline = time.monotonic() + kills * PER_KILL_S
        for i in range(kills):
            assert time.monotonic() < deadline, f"only {i} kills in the time allowed"
            name = f"k{i:03d}"
            proc = fleet.start(name, env(name))
            if rng.random() < 0.3:
                # Anywhere, start-up included.
                await asyncio.sleep(rng.uniform(0.2, 3.0))
            else:
                # While it works: once it holds shards (after the last one's leases expired).
                await until(
                    lambda name=name: name in leases(db).owners.values(),  # type: ignore[misc]
                    30,
                    f"{name} to take shards",
                    interval=0.1,
                    blocking=True,
                )
                await asyncio.sleep(rng.uniform(0.0, 2.5))
            assert proc.proc.poll() is None, f"{name} exited by itself:\n{proc.log()[-3000:]}"
            proc.kill()
            killed.append(name)
        fleet.start("final", env("final"))
        await wait_split(db, ["final"])  # once the killed ones' leases have expired
        assert writers.running, "the writers stopped before the kills did"
        log = writers.stop()
    await fleet.drained(db, 120)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 1000, "too little traffic to prove anything"
    assert_clean(delivery_problems(verdict, log), db, fleet)
    worked = [n for n in settled_by(db) if n in killed]
    # Kills landed while relays were working, not only before they got going.
    assert len(worked) >= kills // 3, f"only {len(worked)} of {kills} killed relays published"
    if db.dialect == "postgres":
        # The relays claimed above floors they moved while being killed and taking over.
        floored = sum("claim floors set" in p.log() for p in fleet.procs.values())
        assert floored >= kills // 3, f"only {floored} relays set claim floors"
        # The partitions rotated during the kills: those of the first seconds are gone, and
        # the ones alive were made during the run.
        bounds = [(int(lo), int(hi)) for lo, hi in fetch(db, "published_partition_bounds")]
        assert bounds, "no partition of outbox_published"
        assert min(lo for lo, _ in bounds) > started + 10, bounds
    else:
        # MariaDB has no claim floors; its purge deleted the rows of the first seconds.
        oldest_age = scalar(db, "published_oldest_age_s")
        assert oldest_age is not None, "no row kept in outbox_published"
        assert float(oldest_age) < time.time() - started - 10, (oldest_age, started)
    # A kill repeats what its relay had sent and not yet settled: at most two cycles (one
    # settling, the next sent beside it) of batch_size rows per held shard, the bound
    # checked here. Most kills repeat a few rows (7 over 20 kills on Postgres on a quiet
    # machine); those in the first cycles after a takeover repeat the backlog that built
    # up while the dead relay's leases expired, and how much of it is in flight depends
    # on the machine's speed at that moment: 1,470 over 20 kills on Postgres, and 3 to 70
    # a kill on MariaDB, on a 2-core machine running the rest of the suite beside it.
    most = kills * 2 * 16 * batch_size
    assert verdict.duplicates <= most, (verdict.duplicates, kills, batch_size)
    print(
        f"kills {kills}; killed relays that published {len(worked)}; committed "
        f"{len(log.committed)}; records {verdict.records}; duplicates {verdict.duplicates}"
    )


# --------------------------------------------------------------------------- 3. zombie


async def test_paused_relay_is_fenced_after_takeover(
    db: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    topic = await new_topic("zombie", partitions=3)
    ttl = 3.0

    def env(name: str, **over: Any) -> dict[str, str]:
        # retention=keep: a settle moves its rows into outbox_published. A stale settle is
        # refused by the fence (the statement reports the shard lost, whether or not its
        # rows are still there), and the audit sees every row any settle moved.
        return named_relay_env(
            db, kafka_bootstrap, name, batch_size=20, lease_ttl_s=ttl, retention="keep", **over
        )

    cycles: list[tuple[float, list[str]]] = []  # per pause: takeover time, zombie's lease lines
    with Writers(db, topic, threads=2, keys=50, seed=3, pause_between_s=0.01) as writers:
        # A long linger keeps the zombie's batches in flight most of the time, so a pause
        # usually lands between claim and settle: on resume it tries a stale settle.
        zombie = fleet.start("zombie", env("zombie", kafka_linger_ms=100))
        await wait_split(db, ["zombie"])
        await writers.wait_committed(100)
        fleet.start("b", env("b"))
        for _ in range(3):  # until a resumed settle was refused (usually the first pause)
            before = await wait_split(db, ["b", "zombie"])
            held = {s: before.tokens[s] for s, o in before.owners.items() if o == "zombie"}
            await publishing(db, ["zombie"], writers)  # its batches in flight
            zombie.signal(signal.SIGSTOP)
            stopped_at = time.monotonic()

            def taken_over(held: dict[int, int] = held) -> bool:
                view = leases(db)
                return all(view.owners[s] == "b" and view.tokens[s] > t for s, t in held.items())

            await until(
                taken_over, ttl * 4 + 10, "b to take over the paused relay's shards", blocking=True
            )
            took_s = time.monotonic() - stopped_at
            assert took_s >= ttl * 0.8, f"shards moved after {took_s:.1f}s, before expiry"
            await publishing(db, ["b"], writers)  # b delivers alone while the zombie sleeps
            mark = len(zombie.log())
            zombie.signal(signal.SIGCONT)
            await until(
                lambda mark=mark: "lease lost" in zombie.log()[mark:],  # type: ignore[misc]
                20,
                "the resumed relay to see its lease lost",
                blocking=True,
            )
            await asyncio.sleep(0.5)
            lines = [ln for ln in zombie.log()[mark:].splitlines() if "lease" in ln]
            cycles.append((took_s, lines))
            if any("fenced write refused" in ln for ln in lines):
                break
        await wait_split(db, ["b", "zombie"])  # it rejoins under new tokens
        await publishing(db, ["b", "zombie"], writers)
        log = writers.stop()
    await fleet.drained(db, 60)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert_clean(delivery_problems(verdict, log), db, fleet)
    assert any("fenced write refused" in ln for ln in cycles[-1][1]), (
        f"the resumed relay never tried a stale settle: {cycles}"
    )
    assert "zombie" in settled_by(db)
    print(
        f"pauses {len(cycles)}; takeover after {[round(t, 1) for t, _ in cycles]}s; "
        f"zombie after SIGCONT: {[ln[25:100] for ln in cycles[-1][1]][:5]}; "
        f"duplicates {verdict.duplicates}"
    )


# --------------------------------------------------------------------------- 3a. chaos


@dataclass
class Chaos:
    """Three relay slots under random SIGKILLs and pauses. A killed relay is replaced by a
    new replica (a new name); a paused one (a zombie) is resumed once its lease expired and
    another relay took every shard it held over (new tokens), so the fence refuses its
    stale settles."""

    db: Backend
    bootstrap: str
    fleet: RelayFleet
    rng: random.Random
    ttl: float
    batch_size: int
    live: list[str] = field(default_factory=list)
    paused: dict[str, float] = field(default_factory=dict)  # name -> when to resume
    marks: dict[str, int] = field(default_factory=dict)  # zombie -> its log's length at pause
    held: dict[str, dict[int, int]] = field(default_factory=dict)  # zombie -> shard -> token
    kills: int = 0
    zombies: int = 0
    started: int = 0

    def spawn(self) -> None:
        name = f"c{self.started:03d}"
        self.started += 1
        # retention=keep: every settle moves rows into outbox_published (on MariaDB a
        # copy and a delete in one transaction), which a kill can cut in half. A lock
        # timeout under the lease: on MariaDB a relay paused inside its settle holds its
        # lease rows until the server ends its idle transaction after that long.
        env = named_relay_env(
            self.db,
            self.bootstrap,
            name,
            batch_size=self.batch_size,
            lease_ttl_s=self.ttl,
            retention="keep",
            database_lock_timeout_s=1.0,
        )
        self.fleet.start(name, env)
        self.live.append(name)

    def taken_over(self, name: str) -> bool:
        view = leases(self.db)
        return all(
            view.owners.get(s) not in (None, name) and view.tokens[s] > t
            for s, t in self.held[name].items()
        )

    def resume(self, name: str) -> None:
        self.fleet.procs[name].signal(signal.SIGCONT)
        del self.paused[name]

    def resume_due(self, now: float) -> None:
        for name, at in list(self.paused.items()):
            if now >= at and self.taken_over(name):
                self.resume(name)

    def strike(self, now: float) -> None:
        """SIGKILL a working relay, or pause one that holds shards past its lease (at most
        two paused at once)."""
        working = [n for n in self.live if n not in self.paused]
        holders = [n for n in working if n in leases(self.db).owners.values()]
        pause = len(self.paused) < 2 and (self.zombies == 0 or self.rng.random() < 0.4)
        if self.kills == 0 or not holders:
            pause = False  # the first strike is a kill, the second a pause
        name = self.rng.choice(holders if pause else working)
        proc = self.fleet.procs[name]
        assert proc.proc.poll() is None, f"{name} exited by itself:\n{proc.log()[-3000:]}"
        if pause:
            self.marks[name] = len(proc.log())
            proc.signal(signal.SIGSTOP)
            view = leases(self.db)
            self.held[name] = {s: view.tokens[s] for s, o in view.owners.items() if o == name}
            self.paused[name] = now + self.ttl * self.rng.uniform(1.5, 3.0)
            self.zombies += 1
        else:
            proc.kill()
            self.live.remove(name)
            self.kills += 1
            self.spawn()

    async def resume_all(self) -> None:
        """Each zombie once its shards are taken over, whatever the load."""
        for name in list(self.paused):
            await until(
                lambda name=name: self.taken_over(name),  # type: ignore[misc]
                self.ttl * 4 + 30,
                f"the shards {name} held, taken over",
                blocking=True,
            )
            self.resume(name)


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_chaos_of_kills_and_zombies_loses_nothing_and_keeps_key_order(
    db: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    fleet: RelayFleet,
    full_size: bool,
) -> None:
    """Three relays; for the chaos's length, every 0.5-2.5 s one of them is SIGKILLed (and
    replaced) or paused past its lease and resumed later, while six writers commit out of
    order (a pause before COMMIT) and roll back. Nothing committed is lost, nothing rolled
    back is sent, no key's order breaks, and no row is settled by a relay that did not
    hold its lease; duplicates are counted."""
    seconds = 90.0 if full_size else 12.0
    topic = await new_topic("chaos", partitions=3)
    chaos = Chaos(db, kafka_bootstrap, fleet, random.Random(7), ttl=2.0, batch_size=50)
    for _ in range(3):
        chaos.spawn()
    with Writers(
        db,
        topic,
        threads=6,
        keys=60,
        seed=7,
        events_per_tx=(1, 4),
        rollback_rate=0.1,
        pause_before_commit_s=(0.0, 0.1),
        pause_between_s=0.01,
        max_seconds=seconds + 300,
    ) as writers:
        await wait_split(db, chaos.live)
        await writers.wait_committed(100)
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            await asyncio.sleep(chaos.rng.uniform(0.5, 2.5))
            now = time.monotonic()
            chaos.resume_due(now)
            chaos.strike(now)
        chaos_s = time.monotonic() - t0
        await chaos.resume_all()
        await wait_split(db, chaos.live, timeout=chaos.ttl * 4 + 30)  # the fleet settles down
        assert writers.running, "the writers stopped before the chaos did"
        log = writers.stop()
    await fleet.drained(db, 120)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 500, "too little traffic to prove anything"
    assert log.rolled_back, "no transaction rolled back"
    assert chaos.kills >= 1, "no relay was killed"
    assert chaos.zombies >= 1, "no relay was paused"
    assert_clean(delivery_problems(verdict, log), db, fleet)
    # The zombies woke up past their leases: each found its shards taken over.
    fenced = [n for n, mark in chaos.marks.items() if "lease lost" in fleet.procs[n].log()[mark:]]
    assert fenced, f"no paused relay saw its lease lost\n{fleet.logs()}"
    print(
        f"{db.dialect} chaos {chaos_s:.0f}s: committed {len(log.committed)}, rolled back "
        f"{len(log.rolled_back)}, lost at COMMIT {len(log.uncertain)}; records "
        f"{verdict.records}; duplicates {verdict.duplicates}; kills {chaos.kills}; zombies "
        f"{chaos.zombies} (of which saw a lease lost: {len(fenced)})"
    )


# --------------------------------------------------------------------------- 3b. producer lost


EXIT_CANNOT_PUBLISH = 5  # relay/cli.py


async def test_a_replica_whose_producer_cannot_start_again_hands_its_shards_over_and_exits(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet, tmp_path: Path
) -> None:
    """r2's producer fails fatally, and its replacement's start is refused for good
    (tests/support/broken_producer_relay.py): r2 releases its leases and exits 5, and r1
    takes every shard long before the leases would have expired (lease_ttl_s 60), then
    publishes every committed event in per-key order."""
    topic = await new_topic("producer-lost", partitions=4)
    ttl = {"lease_ttl_s": 60.0, "batch_size": 100}
    armed = tmp_path / "break-r2"
    fleet.start("r1", named_relay_env(pg, kafka_bootstrap, "r1", **ttl))
    broken = named_relay_env(pg, kafka_bootstrap, "r2", **ttl)
    broken["BROKEN_PRODUCER_FILE"] = str(armed)
    r2 = fleet.start("r2", broken, module="tests.support.broken_producer_relay")
    with Writers(pg, topic, threads=2, keys=100, seed=5, pause_between_s=0.02) as writers:
        await wait_split(pg, ["r1", "r2"])
        await writers.wait_committed(300)
        # r2 must have published before it breaks, or the takeover proves nothing.
        await until(
            lambda: settled_by(pg).get("r2", 0) > 0,
            30,
            "r2's first settle",
            state=lambda: settled_by(pg),
            blocking=True,
        )
        armed.touch()
        code = await asyncio.to_thread(r2.wait, 60)
        assert code == EXIT_CANNOT_PUBLISH, r2.log()
        assert "cannot publish" in r2.log(), r2.log()
        assert "ClusterAuthorizationFailed" in r2.log(), r2.log()
        # Released on the way out: nothing is left to expire.
        assert "r2" not in leases(pg).split(), leases(pg)
        await wait_split(pg, ["r1"], timeout=30)  # well within the 60 s the leases had
        await writers.wait_committed(writers.committed + 100)  # r1 alone, under load
        log = writers.stop()
    await fleet.drained(pg, 60)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 300, "too little traffic to prove anything"
    assert_clean(delivery_problems(verdict, log), pg, fleet)
    assert settled_by(pg).get("r2", 0) > 0, "r2 published nothing before it broke"


async def test_a_relay_whose_producer_is_refused_at_start_up_exits_and_holds_nothing(
    pg: Backend, kafka_bootstrap: str, fleet: RelayFleet, tmp_path: Path
) -> None:
    """Refused for good at the first start: the replica leaves without a lease or a
    membership row behind, and exits 5 (a retriable refusal would be retried instead)."""
    armed = tmp_path / "break-r1"
    armed.touch()
    env = named_relay_env(pg, kafka_bootstrap, "r1", lease_ttl_s=60.0)
    env["BROKEN_PRODUCER_FILE"] = str(armed)
    r1 = fleet.start("r1", env, module="tests.support.broken_producer_relay")
    code = await asyncio.to_thread(r1.wait, 60)
    assert code == EXIT_CANNOT_PUBLISH, r1.log()
    assert "cannot publish: kafka start failed for good" in r1.log(), r1.log()
    assert "r1" not in leases(pg).split()
    assert fetch(pg, "replica_owners") == []


# --------------------------------------------------------------------------- 4. Kafka down


@pytest.mark.serial
async def test_broker_outage_loses_nothing_and_parks_nothing(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    require_managed_services()
    topic = await new_topic("outage", partitions=3)
    with Writers(pg, topic, threads=1, keys=100, seed=4, pause_between_s=0.02) as writers:
        relay = fleet.start("r", named_relay_env(pg, kafka_bootstrap, "r", batch_size=100))
        await wait_split(pg, ["r"])
        await writers.wait_committed(300)
        await until(
            lambda: settled_by(pg).get("r", 0) > 100, 30, "the relay to publish", blocking=True
        )
        before = writers.committed
        t0 = time.monotonic()
        with service_down("kafka"):
            # Away until the relay has retried twice, while writers keep committing. Which
            # retry depends on how the producer saw the broker go: a batch without acks, or
            # a producer broken for good and being made again.
            await until(
                lambda: (
                    len(KAFKA_RETRIED.findall(relay.log())) >= 2
                    and writers.committed - before > 100
                ),
                # A batch without acks fails after request_timeout_ms (30 s); under CI's
                # load, a producer's recreation once took 110 s before the first retry.
                240,
                "failed batches retried and 100 events committed during the outage",
                alive=relay.check_alive,
            )
            during = writers.committed - before
        outage_s = time.monotonic() - t0
        await publishing(pg, ["r"], writers)  # the relay resumes while writers go on
        log = writers.stop()
    await fleet.drained(pg, 120)
    assert relay.proc.poll() is None, "the relay must resume by itself, not exit"
    assert KAFKA_RETRIED.search(relay.log()), "the outage never reached the relay"
    assert parked_rows(pg) == []
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert_clean(delivery_problems(verdict, log), pg, fleet)
    print(
        f"broker away {outage_s:.0f}s; committed during it {during}; total "
        f"{len(log.committed)}; duplicates {verdict.duplicates}"
    )


# --------------------------------------------------------------------------- 5. database down


@pytest.mark.serial
async def test_database_restart_loses_nothing(
    db: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    require_managed_services()
    topic = await new_topic("dbrestart", partitions=3)
    with Writers(db, topic, threads=2, keys=100, seed=5, pause_between_s=0.02) as writers:
        relay = fleet.start("r", named_relay_env(db, kafka_bootstrap, "r", batch_size=100))
        await wait_split(db, ["r"])
        await writers.wait_committed(300)
        t0 = time.monotonic()
        noticed = ("heartbeat failed", "batch failed; retrying", "lease lost")
        with service_down(db.dialect):
            # Down until writers and the relay have both hit it.
            failed = writers.errors
            await until(
                lambda: writers.errors > failed and any(n in relay.log() for n in noticed),
                60,
                "writers and the relay to see the database gone",
                alive=relay.check_alive,
                state=lambda: (
                    f"writer errors {writers.errors - failed}; the relay's "
                    f"warnings:\n{warnings_in(relay.log())}"
                ),
            )
        restart_s = time.monotonic() - t0
        assert relay.proc.poll() is None, relay.log()[-3000:]
        # Writers commit again after the restart, and the relay publishes again.
        await publishing(db, ["r"], writers)
        log = writers.stop()
    await fleet.drained(db, 120)
    assert relay.proc.poll() is None, "the relay must resume by itself, not exit"
    assert any(n in relay.log() for n in noticed), "the restart never reached the relay"
    assert parked_rows(db) == []
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert_clean(delivery_problems(verdict, log), db, fleet)
    assert log.errors > 0, "the writers never saw the database go away"
    print(
        f"database away {restart_s:.0f}s; writer errors {log.errors}; commits lost at COMMIT "
        f"{len(log.uncertain)}; committed {len(log.committed)}; duplicates {verdict.duplicates}"
    )


# --------------------------------------------------------------------------- 6. commit order


async def test_out_of_order_commits_are_neither_skipped_nor_stalled(
    db: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    topic = await new_topic("ooo", partitions=3)
    relay = fleet.start("r", named_relay_env(db, kafka_bootstrap, "r", batch_size=50))
    await wait_split(db, ["r"])
    oldest: list[float] = []
    with Writers(
        db,
        topic,
        threads=12,
        keys=60,
        seed=6,
        events_per_tx=(1, 3),
        rollback_rate=0.05,
        pause_before_commit_s=(0.0, 0.5),
        pause_between_s=0.0,
    ) as writers:
        end = time.monotonic() + 15
        while time.monotonic() < end:
            oldest.append(float(scalar(db, "oldest_unpublished_age_s")))
            await asyncio.sleep(0.5)
        log = writers.stop()
    t0 = time.monotonic()
    await fleet.drained(db, 20)
    drain_s = time.monotonic() - t0
    assert relay.proc.poll() is None
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 500, log.transactions
    assert len(log.rolled_back) > 10, log.transactions
    assert_clean(delivery_problems(verdict, log), db, fleet)
    if db.dialect == "postgres":
        # ... although the claims started above floors that moved all along (MariaDB has
        # no claim floors).
        assert "claim floors set" in relay.log(), "no claim floor was set"
    # Nothing waits behind a slow transaction: the oldest committed row stays young.
    assert max(oldest) < 10, f"a committed row waited {max(oldest):.1f}s"
    # One relay that nothing stopped or fenced sends each row once.
    assert verdict.duplicates == 0, verdict.duplicates
    print(
        f"committed {len(log.committed)}, rolled back {len(log.rolled_back)}; oldest pending "
        f"row max {max(oldest):.2f}s; drained {drain_s:.1f}s after the writers stopped"
    )


# --------------------------------------------------------------------------- 7. poison rows


@pytest.mark.parametrize("policy", ["block_key", "skip"])
async def test_oversized_rows_are_parked_without_blocking_other_keys(
    policy: str, pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    limit = 20_000
    topic = await new_topic("poison", partitions=2, configs={"max.message.bytes": str(limit)})
    poison_keys = ["P0", "P1", "P2"]
    big = {"blob": "x" * (limit + 10_000)}  # over the topic's limit, far below the producer's
    outbox = Outbox()

    def commit(events: list[Event]) -> list[str]:
        with sync_tx(pg, "driver") as conn:
            return [str(e) for e in outbox.emit_batch(conn, events)]

    def normal(n: int, tag: str) -> list[Event]:
        return [Event(topic, f"n-{i % 20}", "Normal", {"tag": tag, "i": i}) for i in range(n)]

    commit(
        normal(60, "a")
        + [Event(topic, k, "Before", {"i": i}) for k in poison_keys for i in range(2)]
    )
    big_ids = commit([Event(topic, k, "Big", big) for k in poison_keys] + normal(20, "b"))[:3]
    later_ids = commit(
        [Event(topic, k, "After", {"i": i}) for k in poison_keys for i in range(3)]
        + normal(60, "c")
    )[:9]
    commit(normal(60, "d"))
    expected = expected_from_db(pg)
    all_ids = {e for ids in expected.values() for e in ids}
    # Read before the relay runs: retention=keep moves published rows out of outbox_events.
    id_of = {str(r[1]): r[0] for r in pg.fetch("outbox_rows")}

    relay = fleet.start(
        "r",
        named_relay_env(
            pg,
            kafka_bootstrap,
            "r",
            batch_size=100,
            failure_policy=policy,
            retention="keep",
            max_attempts=5,
            backoff_base_s=0.1,
            backoff_max_s=0.3,
            # A rejected batch breaks the idempotent producer (it is recreated); a batch
            # caught in that is given up after 3 request timeouts: keep those short.
            kafka_request_timeout_ms=3000,
        ),
    )
    held_back = 9 if policy == "block_key" else 0

    def settled() -> bool:
        return len(parked_rows(pg)) == 3 and pg.scalar("outbox_unpublished_pending") == held_back

    def state() -> str:
        rows = [r for r in fetch(pg, "row_states") if r[2] != "pending" or r[3] or not r[4]]
        return f"rows not plainly published: {[(*r[:5], r[5][:80]) for r in rows]}\n{fleet.logs()}"

    await until(settled, 60, f"3 parked rows and {held_back} held back", state=state, blocking=True)
    # And it stays so while the relay goes on probing: ten more cycles, each of which
    # would have claimed a row let go too early.
    port = await until(lambda: ops_port_in(relay.log()), 30, "the relay's ops endpoint")
    probes = (await scrape(port)).value("outbox_relay_probes_total") or 0.0

    async def probed_on() -> bool:
        now = (await scrape(port)).value("outbox_relay_probes_total") or 0.0
        return now >= probes + 10

    await until(probed_on, 60, "ten more probes")
    states = {row[0]: row for row in fetch(pg, "row_states")}
    stop_all(fleet)

    parked = parked_rows(pg)
    assert sorted(r[0] for r in parked) == sorted(id_of[e] for e in big_ids), parked
    for _, key, attempts, error in parked:
        assert key in poison_keys
        assert attempts >= 1
        assert re.search(r"too.?large", error, re.IGNORECASE), error
    later = [states[id_of[e]] for e in later_ids]
    if policy == "block_key":
        # Held back behind their parked row (tried at most alongside it, never published).
        assert all(not pub and status == "pending" for _, _, status, _, pub, _ in later), later
    else:
        assert all(pub for *_, pub, _ in later), later

    records = await read_topic(kafka_bootstrap, topic, timeout=60)
    verdict = judge(records, expected)
    should_arrive = all_ids - set(big_ids) - (set(later_ids) if policy == "block_key" else set())
    assert verdict.delivered == should_arrive, (
        f"missing {len(should_arrive - verdict.delivered)}, "
        f"unexpected {len(verdict.delivered - should_arrive)}\n{fleet.logs()}"
    )
    if policy == "block_key":
        ordered = set(expected)
    else:
        # skip lets later rows overtake a failed one: order is promised only for keys
        # none of whose rows ever failed.
        ordered = {key for key in expected} - {row[1] for row in states.values() if row[3]}
    ordered_expected = {k: v for k, v in expected.items() if k in ordered}
    violations = judge(records, ordered_expected).order_violations
    if violations:
        key = violations[0].split("'")[1]
        arrived = [
            (r.partition, r.offset, (r.header("event_id") or b"").decode()[:8])
            for r in records
            if r.key == key.encode()
        ]
        rows = [(r[0], r[2], r[3], r[5][:50]) for r in states.values() if r[1] == key]
        pytest.fail(f"{violations}\narrived {arrived}\nrows {rows}\n{fleet.logs()}")
    assert verdict.duplicates == 0
    print(
        f"{policy}: ordered keys {len(ordered)}/{len(expected)}; parked {[(k, a, e[:60]) for _, k, a, e in parked]}"
    )


# --------------------------------------------------------------------------- 8. bad config

CANARY = "canary-Secret-7f3a9c"


@dataclass(frozen=True)
class BadConfig:
    name: str
    over: dict[str, Any]
    says: list[str]  # fragments stderr must contain
    migrate: bool = True
    forge_migration: bool = False
    extra: dict[str, str] = field(default_factory=dict)


BAD_CONFIGS = [
    BadConfig("acks=1", {"kafka_acks": "1"}, ["OUTBOX_KAFKA_ACKS", "unsafe"]),
    BadConfig(
        "idempotence off",
        {"kafka_enable_idempotence": False},
        ["OUTBOX_KAFKA_ENABLE_IDEMPOTENCE", "unsafe"],
    ),
    BadConfig(
        "malformed bootstrap",
        {"kafka_bootstrap_servers": "127.0.0.1;9092"},
        ["OUTBOX_KAFKA_BOOTSTRAP_SERVERS", "host:port"],
    ),
    BadConfig(
        "transaction pooler on MariaDB",
        {
            "database_url": f"mysql://outbox:{CANARY}@127.0.0.1:3306/outbox",
            "database_pooler": "transaction",
        },
        ["database_pooler", "MariaDB"],
    ),
    BadConfig(
        "unknown database url",
        {"database_url": f"oracle://outbox:{CANARY}@127.0.0.1:1521/outbox"},
        ["OUTBOX_DATABASE_URL", "oracle"],
    ),
    BadConfig(
        "unknown schema version",
        {},
        ["refusing to start", "9999", "upgrade the relay"],
        forge_migration=True,
    ),
    BadConfig(
        "shard count mismatch", {"shard_count": 8}, ["refusing to start", "shard_count", "8", "16"]
    ),
    BadConfig(
        "unmigrated database", {}, ["refusing to start", "outbox-relay migrate"], migrate=False
    ),
]


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    user = parts.username or "outbox"
    host = parts.hostname or "127.0.0.1"
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}:{parts.port or 5432}"))


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=lambda c: c.name)
async def test_bad_configuration_exits_2_and_touches_nothing(
    case: BadConfig, pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("badcfg")
    backend = postgres_backend(pg_url)
    if case.migrate:
        backend.migrate()
        with sync_tx(backend, "driver") as conn:
            Outbox().emit(conn, topic=topic, key="k", event_type="E", payload={"n": 1})
    if case.forge_migration:
        backend.execute("migration_forge")
    # The server trusts local connections: the canary password reaches a real database.
    secret = postgres_backend(with_password(pg_url, CANARY))
    env = relay_env(secret, kafka_bootstrap, **case.over)
    t0 = time.monotonic()
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "relay.cli", "run"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    for fragment in case.says:
        assert fragment in done.stderr, f"{fragment!r} not in {done.stderr!r}"
    assert "Traceback" not in out, out
    assert CANARY not in out, "the database password was printed"
    if case.migrate:
        assert scalar(backend, "lease_count") == 0
        assert fetch(backend, "replica_owners") == []
        assert scalar(backend, "rows_touched") == 0
        assert backend.scalar("outbox_unpublished_pending") == 1
    else:
        assert scalar(backend, "public_table_count") == 0, "the relay created tables"
    assert await read_topic(kafka_bootstrap, topic) == []
    print(f"{case.name}: exit 2 in {took:.1f}s: {done.stderr.strip().splitlines()[-1][:150]}")


# --------------------------------------------------------------------------- 9. SQLite


async def test_sqlite_refuses_a_second_relay_while_the_first_delivers(
    tmp_path: Path, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    backend = sqlite_backend(tmp_path / "outbox.sqlite3")
    backend.migrate()
    topic = await new_topic("sqlite", partitions=2)
    outbox = Outbox()
    rng = random.Random(9)

    def write(n: int) -> None:
        for start in range(0, n, 10):
            with sync_tx(backend, "driver") as conn:
                outbox.emit_batch(
                    conn,
                    [
                        Event(topic, f"key-{rng.randrange(20)}", "E", {"i": start + j})
                        for j in range(10)
                    ],
                )

    env = relay_env(backend, kafka_bootstrap, retention="keep", replica_id="first")
    first = fleet.start("first", env)
    await until(
        lambda: "relay started" in first.log(), 30, "the first relay to start", blocking=True
    )
    await asyncio.to_thread(write, 300)

    second_env = relay_env(backend, kafka_bootstrap, retention="keep", replica_id="second")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "relay.cli", "run"],
        env=second_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "another relay is already running" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert first.proc.poll() is None

    await asyncio.to_thread(write, 300)
    await fleet.drained(backend, 60)
    assert fetch(backend, "replica_owners") == [("first",)]
    owners = {row[1] for row in backend.fetch("lease_rows")}
    assert owners == {"first"}, owners
    stop_all(fleet)

    expected = expected_from_db(backend)
    verdict = await judge_topic(kafka_bootstrap, topic, expected)
    all_ids = [e for ids in expected.values() for e in ids]
    assert len(all_ids) == 600
    assert verdict.missing(all_ids) == set()
    assert verdict.unexpected(all_ids) == set()
    assert verdict.order_violations == []
    assert verdict.duplicates == 0


# --------------------------------------------------------------------------- standbys


def sole_owner(backend: Backend, shard_count: int = 16) -> str | None:
    """The one replica holding every shard's live lease, if one does."""
    split = leases(backend).split()
    owner = next(iter(split)) if len(split) == 1 else None
    return owner if owner is not None and split[owner] == shard_count else None


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_sigkill_of_the_active_replica_hands_over_to_a_standby(
    pg: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    fleet: RelayFleet,
    full_size: bool,
) -> None:
    """active_replicas=1 and two standbys under load: the active replica (the only one that
    probes, claims and settles) is SIGKILLed again and again. A standby takes every shard
    once the leases expire and delivers what was committed meanwhile; nothing is lost,
    per-key order holds, and no standby ever settled a row before it became active."""
    kills = 12 if full_size else 3
    topic = await new_topic("standby", partitions=3)
    names = iter(f"s{i:02d}" for i in range(100))

    async def start() -> str:
        name = next(names)
        proc = fleet.start(
            name,
            named_relay_env(pg, kafka_bootstrap, name, active_replicas=1, lease_ttl_s=2.0),
        )
        await until(lambda: "relay started" in proc.log(), 60, f"{name} to start", blocking=True)
        return name

    actives: list[str] = []
    with Writers(pg, topic, threads=2, keys=100, seed=29, pause_between_s=0.02) as writers:
        for _ in range(3):
            await start()
        for i in range(kills + 1):
            # The killed one's leases expire first (lease_ttl_s): then one standby takes all.
            active = await until(
                lambda: (owner := sole_owner(pg)) not in actives and owner,
                60,
                "a new replica holding every shard",
                blocking=True,
            )
            actives.append(active)
            before = settled_by(pg).get(active, 0)
            # Delivery resumed: the new active replica publishes what is committed now.
            await until(
                lambda a=active, b=before: settled_by(pg).get(a, 0) > b + 50,  # type: ignore[misc]
                60,
                f"{active} to publish",
                blocking=True,
            )
            # Standbys issue no settle: only replicas that have been active did.
            assert set(settled_by(pg)) <= set(actives), (settled_by(pg), actives)
            if i == kills:
                break
            assert fleet.procs[active].kill() == -signal.SIGKILL
            await start()  # the fleet keeps its size: a new standby
        log = writers.stop()
    await fleet.drained(pg, 120)
    stop_all(fleet)

    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert len(log.committed) > 500, "too little traffic to prove anything"
    assert_clean(delivery_problems(verdict, log), pg, fleet)
    assert set(settled_by(pg)) == set(actives), (settled_by(pg), actives)
    print(f"actives {actives}; committed {len(log.committed)}; duplicates {verdict.duplicates}")
