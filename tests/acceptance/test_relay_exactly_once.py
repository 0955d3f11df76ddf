"""Exactly once into Kafka (kafka_transactions) under faults, relays as processes on real
Postgres and Kafka: three transactional relays, SIGKILLs at random points and a relay
SIGSTOPped past its lease (a zombie) while writers commit with rollbacks. A read_committed
reader (tests.support.kafka.read_topic, through judge_log) finds every committed event
once, nothing else, each key in order. The same run without transactions prints the
duplicates the setting removes.

Small in CI; `--full` (the full_size fixture) runs it at full size.
"""

from __future__ import annotations

import asyncio
import random
import signal
import uuid
from typing import Any

import pytest

from tests.acceptance import test_relay_faults
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.faults import (
    RelayFleet,
    Writers,
    audit_violations,
    broker_paused,
    delivery_problems,
    judge_log,
    leases,
    named_relay_env,
    service_down,
    settled_by,
    wait_split,
)
from tests.support.kafka import unique_topic_name
from tests.support.relay import Verdict
from tests.support.waits import until

pytestmark = pytest.mark.integration

# The relay fault tests' fixtures: Postgres with the settle audit, the relay processes.
pg = test_relay_faults.pg
fleet = test_relay_faults.fleet

TTL_S = 3.0


def transactional(run: str) -> dict[str, Any]:
    """The settings of a transactional relay of one test run (its own ids and topic)."""
    return {
        "kafka_transactions": True,
        "kafka_transactional_id_prefix": f"eos-{run}",
        "kafka_progress_topic": unique_topic_name("progress"),
        "kafka_transaction_timeout_ms": 2000,
    }


async def chaos(
    pg: Backend,
    bootstrap: str,
    topic: str,
    fleet: RelayFleet,
    *,
    rounds: int,
    transactions: bool,
    seed: int,
) -> tuple[Verdict, list[str], int]:
    """Three relays, a SIGKILL per round (a zombie every third): (verdict, problems,
    events committed)."""
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:8]
    extra = transactional(run) if transactions else {}

    def start(name: str) -> None:
        env = named_relay_env(pg, bootstrap, name, batch_size=50, lease_ttl_s=TTL_S, **extra)
        fleet.start(name, env)

    names = ["r0", "r1", "r2"]
    with Writers(
        pg, topic, threads=2, keys=60, seed=seed, pause_between_s=0.01, rollback_rate=0.1
    ) as writers:
        for name in names:
            start(name)
        await wait_split(pg, names)
        await writers.wait_committed(100)
        for i in range(rounds):
            victim = rng.choice(names)
            await until(
                lambda v=victim: v in leases(pg).owners.values(),  # type: ignore[misc]
                30,
                f"{victim} to hold shards",
                blocking=True,
            )
            await asyncio.sleep(rng.uniform(0.0, 1.5))  # anywhere in its cycles
            proc = fleet.procs[victim]
            if i % 3 == 2:
                # A zombie: paused past its lease while the others take its shards over,
                # then resumed with its transaction (or settle) in hand.
                proc.signal(signal.SIGSTOP)
                await wait_split(pg, [n for n in names if n != victim])
                proc.signal(signal.SIGCONT)
                await wait_split(pg, names)
                continue
            proc.kill()
            names.remove(victim)
            replacement = f"k{i:02d}"
            start(replacement)
            names.append(replacement)
            await wait_split(pg, names)  # once the killed one's leases have expired
        log = writers.stop()
    await fleet.drained(pg, 120)
    codes = {n: p.terminate(60) for n, p in fleet.procs.items() if p.proc.poll() is None}
    assert all(c == 0 for c in codes.values()), f"exit codes {codes}\n{fleet.logs()}"
    verdict = await judge_log(bootstrap, topic, log)
    assert log.rolled_back, "no transaction rolled back"
    assert audit_violations(pg) == [], "rows settled without the lease"
    return verdict, delivery_problems(verdict, log), len(log.committed)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "at-least-once"])
async def test_kills_and_zombies_leave_no_duplicate_with_transactions(
    pg: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    fleet: RelayFleet,
    full_size: bool,
    transactions: bool,
) -> None:
    """With transactions: 0 lost, 0 duplicates, 0 order violations. Without: nothing lost,
    the duplicates printed (how many depends on where the kills land; a small run may
    see none)."""
    topic = await new_topic("eos", partitions=3)
    rounds = 30 if full_size else 4
    verdict, problems, committed = await chaos(
        pg, kafka_bootstrap, topic, fleet, rounds=rounds, transactions=transactions, seed=41
    )
    assert problems == [], f"{problems}\n{fleet.logs()}"  # 0 lost, 0 order violations
    assert committed > 300, "too little traffic to prove anything"
    if transactions:
        assert verdict.duplicates == 0, f"{verdict.duplicates} duplicates\n{fleet.logs()}"
        # Whole logs: a relay says it once per init of its producer, and fleet.logs()
        # keeps only each log's tail.
        assert any("transactional producer started" in p.log() for p in fleet.procs.values())
    print(
        f"transactions {'on' if transactions else 'off'}: rounds {rounds}; committed "
        f"{committed}; records {verdict.records}; duplicates {verdict.duplicates}"
    )


async def settling(pg: Backend, names: list[str], writers: Writers, more: int = 100) -> None:
    """Until the relays have settled `more` rows beyond now and the writers committed on."""
    before = sum(settled_by(pg).values())
    committed = writers.committed
    await until(
        lambda: sum(settled_by(pg).values()) >= before + more and writers.committed > committed,
        120,
        f"{names} to settle {more} more rows",
        blocking=True,
    )


@pytest.mark.serial
async def test_a_broker_pause_and_a_database_restart_leave_no_duplicate_with_transactions(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory, fleet: RelayFleet
) -> None:
    """Two transactional relays while writers commit: the broker SIGSTOPped past the
    relays' request timeout (transactions in flight can neither commit nor abort), then
    Postgres restarted (settles lost after their commits). A read_committed reader finds
    every committed event once, in key order."""
    test_relay_faults.require_managed_services()
    topic = await new_topic("eos-outages", partitions=3)
    settings = transactional(uuid.uuid4().hex[:8])
    names = ["r0", "r1"]
    with Writers(pg, topic, threads=2, keys=60, seed=43, pause_between_s=0.01) as writers:
        for name in names:
            env = named_relay_env(
                pg, kafka_bootstrap, name, batch_size=50, lease_ttl_s=TTL_S,
                kafka_request_timeout_ms=3000, **settings,
            )  # fmt: skip
            fleet.start(name, env)
        await wait_split(pg, names)
        await writers.wait_committed(200)
        await settling(pg, names, writers)

        with broker_paused():
            # Until a transaction of each relay has failed for the broker's silence.
            await until(
                lambda: all("kafka transaction failed" in fleet.procs[n].log() for n in names),
                60,
                "each relay's transaction to fail while the broker hangs",
                blocking=True,
            )
        await settling(pg, names, writers)

        failed = writers.errors
        with service_down("postgres"):
            noticed = ("heartbeat failed", "batch failed; retrying", "lease lost")
            await until(
                lambda: writers.errors > failed and any(n in fleet.logs() for n in noticed),
                60,
                "the writers and the relays to see the database gone",
                blocking=True,
            )
        await settling(pg, names, writers)
        log = writers.stop()
    await fleet.drained(pg, 120)
    codes = {n: p.terminate(60) for n, p in fleet.procs.items() if p.proc.poll() is None}
    assert all(c == 0 for c in codes.values()), f"exit codes {codes}\n{fleet.logs()}"
    verdict = await judge_log(kafka_bootstrap, topic, log)
    assert delivery_problems(verdict, log) == [], fleet.logs()[-5000:]
    assert verdict.duplicates == 0, f"{verdict.duplicates} duplicates\n{fleet.logs()[-5000:]}"
    assert audit_violations(pg) == [], "rows settled without the lease"
    print(
        f"broker paused and database restarted: committed {len(log.committed)}, lost at "
        f"COMMIT {len(log.uncertain)}; records {verdict.records}; duplicates 0"
    )
