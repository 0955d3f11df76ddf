"""The Redis source's exactly-once guarantee under faults: a consumer process killed
before or after its database commit, and one paused past the claim idle time. Real Redis,
real databases (every backend), consumers as processes (tests.support.redis_consumer_process);
the claimer is a RedisSource in this process.

Every scenario ends with the same verdict: exactly one consumer_effects row per event
(the table has no unique constraint, so a second application would show) and nothing
left pending in the group.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.support.consumers import effect_problems, effects, new_group, prepare, processed_ids
from tests.support.db import Backend
from tests.support.processes import ChildProcess
from tests.support.redis import unique_stream_name
from tests.support.redis_consumers import (
    add_entries,
    no_pending,
    pending_count,
    ready,
    redis_app,
    running_source,
    source_settings,
)
from tests.support.waits import until

pytestmark = pytest.mark.integration

N = 20


class RedisConsumerProcess(ChildProcess):
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        super().__init__(["-m", "tests.support.redis_consumer_process"], env, log_path)


def _env(backend: Backend, redis_url: str, stream: str, group: str, **over: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_TEST_")}
    values = {
        "DIALECT": backend.dialect,
        "DATABASE": backend.target,
        "URL": redis_url,
        "STREAM": stream,
        "GROUP": group,
        "NAME": "victim",
        "CLAIM_IDLE_S": "3600",  # the victim claims nothing: the claimer does
        **over,
    }
    env.update({f"REDIS_TEST_{k}": v for k, v in values.items()})
    return env


async def _add(client: Redis, stream: str, group: str) -> list[str]:
    await client.xgroup_create(stream, group, id="0", mkstream=True)
    return await add_entries(client, stream, N, keys=3)


async def _wait_exit(proc: ChildProcess, timeout: float = 60) -> int:
    return await asyncio.to_thread(proc.wait, timeout)


@pytest.mark.parametrize("where", ["in_handler", "before_ack"])
async def test_a_consumer_killed_around_its_commit_has_its_entries_claimed_and_applied_once(
    backend: Backend, redis_url: str, redis_client: Redis, tmp_path: Path, where: str
) -> None:
    """in_handler: killed before the commit (the 5th entry's effect rolled back);
    before_ack: killed after the 5th entry's commit and before its XACK. Either way the
    victim's pending entries are claimed by another consumer and each applied once."""
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    expected = await _add(redis_client, stream, group)
    env = _env(backend, redis_url, stream, group, CRASH=f"{where}:5")
    victim = RedisConsumerProcess(env, tmp_path / "victim.log")
    assert await _wait_exit(victim) == 9, victim.log()
    assert f"REDIS-TEST-CRASH {where} 5" in victim.log()
    applied_before = len(processed_ids(backend, group))
    assert applied_before == (5 if where == "before_ack" else 4)
    assert await pending_count(redis_client, stream, group) == N - 4  # the 5th: never acked
    app = redis_app(backend, stream, group, applied_by="claimer")
    async with running_source(app, source_settings(redis_url, "claimer", claim_idle_s=0.5)) as s:
        await until(lambda: no_pending(redis_client, stream, group), 60, "all claimed and acked")
    assert effect_problems(effects(backend), expected, group) == []
    assert s.stats.redelivered == N - 4
    assert s.stats.duplicates == (1 if where == "before_ack" else 0)


async def test_a_paused_consumers_late_apply_is_skipped_and_its_ack_is_harmless(
    backend: Backend, redis_url: str, redis_client: Redis, tmp_path: Path
) -> None:
    """The victim stops (SIGSTOP) after its 3rd commit, before that entry's XACK, with the
    rest of its read batch in hand. Past claim_idle_s another consumer claims and applies
    everything. Resumed, the victim acks the 3rd entry and goes through its batch: every
    apply is skipped by the dedup row and its XACKs change nothing."""
    backend = prepare(backend)
    stream, group = unique_stream_name(), new_group()
    expected = await _add(redis_client, stream, group)
    victim = RedisConsumerProcess(
        _env(backend, redis_url, stream, group, PAUSE="3"), tmp_path / "victim.log"
    )
    try:
        await until(lambda: ready("REDIS-TEST-PAUSED 3" in victim.log()), 60, "victim paused")
        await until(lambda: ready(_stopped(victim.pid)), 10, "victim stopped")
        app = redis_app(backend, stream, group, applied_by="claimer")
        settings = source_settings(redis_url, "claimer", claim_idle_s=0.5)
        async with running_source(app, settings) as claimer:
            await until(
                lambda: no_pending(redis_client, stream, group), 60, "all claimed and acked"
            )
        assert len(processed_ids(backend, group)) == N
        victim.signal(signal.SIGCONT)
        assert victim.running
        # The victim goes through its remaining batch: each entry a duplicate now.
        await until(
            lambda: ready(f"REDIS-TEST-HANDLED {N}" in victim.log()), 60, "the victim's batch"
        )
        assert await pending_count(redis_client, stream, group) == 0
        assert victim.terminate(60) == 0, victim.log()
    finally:
        victim.signal(signal.SIGCONT)
        if victim.running:
            victim.kill()
    assert effect_problems(effects(backend), expected, group) == []
    stats = re.search(r"REDIS-TEST-STATS applied=(\d+) duplicates=(\d+)", victim.log())
    assert stats is not None, victim.log()
    assert (int(stats.group(1)), int(stats.group(2))) == (3, N - 3), victim.log()
    assert claimer.stats.applied == N - 3
    assert claimer.stats.duplicates == 1  # the 3rd: committed by the victim, not acked


def _stopped(pid: int) -> bool:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "T"
