"""Fixtures shared by every test layer.

Each test that asks for a backend gets a private one: its own Postgres database, its own
SQLite file, its own Kafka topics. Nothing is shared between tests but the servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.support import kafka as kafka_support
from tests.support import postgres as pg_support
from tests.support import redis as redis_support
from tests.support.db import Backend, postgres_backend, sqlite_backend
from tests.support.services import kafka_bootstrap_servers, postgres_admin_url

TopicFactory = Callable[..., Awaitable[str]]


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[str]:
    with postgres_admin_url() as url:
        yield url


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with kafka_bootstrap_servers() as servers:
        yield servers


@pytest.fixture
def pg_url(postgres_admin: str) -> Iterator[str]:
    """URL of a fresh, empty Postgres database owned by this test."""
    name = pg_support.create_database(postgres_admin)
    try:
        yield pg_support.with_database(postgres_admin, name)
    finally:
        pg_support.drop_database(postgres_admin, name)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Path of a SQLite database file owned by this test (not yet created)."""
    return tmp_path / "outbox.sqlite3"


@pytest.fixture
async def new_topic(kafka_bootstrap: str) -> AsyncIterator[TopicFactory]:
    """Creates Kafka topics private to this test; deletes them afterwards."""
    made: list[str] = []

    async def make(
        prefix: str = "t", partitions: int = 1, configs: dict[str, str] | None = None
    ) -> str:
        name = kafka_support.unique_topic_name(prefix)
        await kafka_support.create_topics(kafka_bootstrap, [name], partitions, configs)
        made.append(name)
        return name

    yield make
    if made:
        await kafka_support.delete_topics(kafka_bootstrap, made)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run the fault-injection tests at full size (CI runs them smaller)",
    )


@pytest.fixture
def full_size(request: pytest.FixtureRequest) -> bool:
    """True under --full: long fault-injection runs use their full size."""
    return bool(request.config.getoption("--full"))


@pytest.fixture(params=["postgres", "sqlite"])
def empty_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A private, unmigrated database of each kind: the scenario runs once per backend."""
    if request.param == "postgres":
        return postgres_backend(request.getfixturevalue("pg_url"))
    return sqlite_backend(tmp_path / "outbox.sqlite3")


@pytest.fixture
def backend(empty_backend: Backend) -> Backend:
    """A private database of each kind with every migration applied."""
    empty_backend.migrate()
    return empty_backend


@pytest.fixture(scope="session")
def redis_url() -> str:
    return redis_support.redis_url_from_env()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the shared Redis; the streams a test makes carry unique names."""
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()
