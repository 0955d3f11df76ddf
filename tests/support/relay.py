"""Running relays in tests (in-process or as subprocesses) and judging what reached Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.config import RelaySettings, load_settings
from relay.service import RelayService
from tests.support.db import Backend
from tests.support.kafka import Record, read_topic
from tests.support.processes import ChildProcess

# Fast enough for tests, still honest: leases expire and move in seconds.
FAST: dict[str, Any] = {
    "lease_ttl_s": 3.0,
    "heartbeat_interval_s": 0.5,
    "backoff_base_s": 0.2,
    "backoff_max_s": 2.0,
    "shutdown_grace_s": 10.0,
    "kafka_request_timeout_ms": 10_000,
    "http_port": 0,  # any free port: many relays run side by side in tests
    "kafka_security_protocol": "PLAINTEXT",  # the test broker; production must choose
}


def relay_settings(backend: Backend, bootstrap: str, **over: Any) -> RelaySettings:
    return load_settings(
        database_url=backend.url, kafka_bootstrap_servers=bootstrap, **{**FAST, **over}
    )


def relay_env(backend: Backend, bootstrap: str, **over: Any) -> dict[str, str]:
    """Environment for `outbox-relay run` in a subprocess (settings by env, as in production)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    values: dict[str, Any] = {
        "database_url": backend.url,
        "kafka_bootstrap_servers": bootstrap,
        **FAST,
        **over,
    }
    for name, value in values.items():
        text = (
            json.dumps(value)
            if isinstance(value, dict)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
        env[f"OUTBOX_{name.upper()}"] = text
    return env


@contextlib.asynccontextmanager
async def running_relay(settings: RelaySettings, **kw: Any) -> AsyncIterator[RelayService]:
    """A relay in this process; stopped gracefully on exit."""
    service = RelayService(settings, **kw)
    task = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        service.stop()
        await asyncio.wait_for(task, timeout=60)


class RelayProcess(ChildProcess):
    """`outbox-relay run` as a child process, for kills, pauses and signals."""

    def __init__(
        self, env: dict[str, str], log_path: Path, name: str = "", module: str = "relay.cli"
    ) -> None:
        """module: what runs as `python -m module run` (a fault hook wrapping relay.cli)."""
        super().__init__(["-m", module, "run"], env, log_path, name)


async def wait_drained(backend: Backend, timeout: float = 60.0, *, parked_ok: bool = False) -> None:
    """Until no unpublished pending row is left (parked rows count only if not parked_ok)."""
    name = "outbox_unpublished_pending" if parked_ok else "outbox_unpublished"
    deadline = time.monotonic() + timeout
    while True:
        left = await asyncio.to_thread(backend.scalar, name)
        if left == 0:
            return
        if time.monotonic() > deadline:
            by_shard = await asyncio.to_thread(backend.fetch, "outbox_unpublished_by_shard")
            holders = await asyncio.to_thread(backend.fetch, "lease_rows")
            raise TimeoutError(
                f"{left} rows still unpublished after {timeout}s; (shard, status, rows, "
                f"lowest id, most attempts): {by_shard}; leases (shard, owner, token): {holders}"
            )
        await asyncio.sleep(0.1)


@dataclass
class Verdict:
    """What a consumer with dedup by event_id would see."""

    delivered: set[str] = field(default_factory=set)
    duplicates: int = 0
    order_violations: list[str] = field(default_factory=list)
    records: int = 0

    def missing(self, expected: Iterable[str]) -> set[str]:
        return set(expected) - self.delivered

    def unexpected(self, expected: Iterable[str]) -> set[str]:
        return self.delivered - set(expected)


def judge(records: list[Record], expected_order: dict[str, list[str]]) -> Verdict:
    """expected_order: per key, event_ids in commit (id) order.

    Order is judged on first occurrences, as a deduplicating consumer applies them: for each
    key the first arrival of every event must follow the expected order.
    """
    position = {eid: i for ids in expected_order.values() for i, eid in enumerate(ids)}
    verdict = Verdict(records=len(records))
    last_seen: dict[bytes | None, int] = defaultdict(lambda: -1)
    for rec in records:
        raw = rec.header("event_id")
        event_id = raw.decode() if raw else ""
        if event_id in verdict.delivered:
            verdict.duplicates += 1
            continue
        verdict.delivered.add(event_id)
        pos = position.get(event_id)
        if pos is None:
            continue
        if pos < last_seen[rec.key]:
            verdict.order_violations.append(f"key {rec.key!r}: {event_id} after a later event")
        last_seen[rec.key] = max(last_seen[rec.key], pos)
    return verdict


async def judge_topic(bootstrap: str, topic: str, expected_order: dict[str, list[str]]) -> Verdict:
    return judge(await read_topic(bootstrap, topic, timeout=60), expected_order)


def expected_from_db(backend: Backend) -> dict[str, list[str]]:
    """Per key, the event_ids of every committed row in id order (read before publishing,
    or after it under retention=keep)."""
    order: dict[str, list[str]] = defaultdict(list)
    for row in backend.fetch("outbox_rows_kept"):
        order[str(row[3])].append(str(row[1]))
    return dict(order)
