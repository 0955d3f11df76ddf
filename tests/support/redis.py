"""Where the tests find Redis: REDIS_URL (scripts/services up starts Debian's redis-server),
and servers of a test's own (a free port, a data folder in tmp_path, AOF on) for tests
that restart Redis mid-run without disturbing anything shared."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.ports import reserved_port
from scripts.service_redis import redis_start, redis_stop
from tests.support.kafka import Record

_NO_REDIS = (
    "REDIS_URL is not set. Run `scripts/services up` and "
    '`eval "$(scripts/services env)"`, or use scripts/test.'
)


def redis_url_from_env() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        raise RuntimeError(_NO_REDIS)
    return url


def unique_stream_name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class OwnRedis:
    """A redis-server this test owns: restart() is SIGTERM (AOF flushed) and start again."""

    port: int
    data: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        redis_start(self.port, self.data)

    def stop(self) -> None:
        redis_stop(self.data)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def own_redis(data: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(reserved_port(), data)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def read_stream(url: str, stream: str) -> list[Record]:
    """Every entry of the stream as the Kafka tests' Record (partition 0, offset = index),
    with the headers the relay wrote as h:<name> fields."""
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        entries: Any = await client.xrange(stream)
    finally:
        await client.aclose()
    return [
        Record(
            stream,
            0,
            i,
            fields.get(b"key"),
            fields.get(b"payload"),
            tuple((k[2:].decode(), v) for k, v in fields.items() if k.startswith(b"h:")),
        )
        for i, (_, fields) in enumerate(entries)
    ]
