"""Fixtures shared by every test layer.

Each test that asks for a backend gets a private one: its own Postgres database, its own
SQLite file, its own Kafka topics. Nothing is shared between tests but the servers, which
is what lets pytest-xdist run them side by side (docs/testing.md).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.support import kafka as kafka_support
from tests.support import redis as redis_support
from tests.support import timings
from tests.support.db import Backend, mariadb_backend, postgres_backend, sqlite_backend
from tests.support.mariadb import MariaDatabases, mariadb_admin_url
from tests.support.postgres import Databases, worker_id
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


@pytest.fixture(scope="session")
def databases(postgres_admin: str) -> Iterator[Databases]:
    """This process's private databases, dropped when its session ends."""
    made = Databases(postgres_admin, worker_id())
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def pg_url(databases: Databases) -> str:
    """URL of a fresh, empty Postgres database owned by this test."""
    return databases.empty()


@pytest.fixture(scope="session")
def mariadb_databases() -> Iterator[MariaDatabases]:
    """This process's private MariaDB databases, dropped when its session ends; skips the
    tests that ask for one when MARIADB_URL is unset."""
    made = MariaDatabases(mariadb_admin_url(), worker_id())
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def mariadb_url(mariadb_databases: MariaDatabases) -> str:
    """URL of a fresh, empty MariaDB database owned by this test."""
    return mariadb_databases.empty()


@pytest.fixture
def migrated_pg_url(databases: Databases) -> str:
    """URL of a Postgres database owned by this test with every migration applied."""
    return databases.migrated()


@pytest.fixture
def pg(migrated_pg_url: str) -> Backend:
    """This test's own migrated Postgres database."""
    return postgres_backend(migrated_pg_url)


@pytest.fixture
def clean_consumer_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OUTBOX_CONSUMER_* variable and no `outbox-consumer run` flag around the test."""
    from consumer_lib.environment import set_flags

    for name in list(os.environ):
        if name.upper().startswith("OUTBOX_CONSUMER_"):
            monkeypatch.delenv(name)
    set_flags({})
    yield
    set_flags({})


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


def _only_listed(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("dialects")
    if marker is not None and request.param not in marker.args:
        pytest.skip(f"runs on {', '.join(marker.args)} only")


def _empty(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "postgres":
        return postgres_backend(request.getfixturevalue("pg_url"))
    if request.param == "mariadb":
        return mariadb_backend(request.getfixturevalue("mariadb_url"))
    return sqlite_backend(tmp_path / "outbox.sqlite3")


def _migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "postgres":
        return postgres_backend(request.getfixturevalue("migrated_pg_url"))
    made = _empty(request, tmp_path)
    made.migrate()
    return made


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def empty_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A private, unmigrated database of each kind: the scenario runs once per backend
    (`@pytest.mark.dialects(...)`: once per backend listed)."""
    _only_listed(request)
    return _empty(request, tmp_path)


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A private database of each kind with every migration applied."""
    _only_listed(request)
    return _migrated(request, tmp_path)


# The databases producer_lib emits to (the relay's store and consumer_lib run on the same
# three: `backend`).
EMIT_DIALECTS = ["postgres", "sqlite", "mariadb"]


@pytest.fixture(params=EMIT_DIALECTS)
def emit_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A private database of each kind producer_lib emits to, every migration applied
    (`@pytest.mark.dialects(...)`: the ones listed)."""
    _only_listed(request)
    return _migrated(request, tmp_path)


@pytest.fixture(params=EMIT_DIALECTS)
def empty_emit_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A private, unmigrated database of each kind producer_lib emits to."""
    return _empty(request, tmp_path)


@pytest.fixture(scope="session")
def redis_url() -> str:
    return redis_support.redis_url_from_env()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the shared Redis; the streams a test makes carry unique names."""
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    timings.record(report)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test that stops a shared server would break every test running beside it.
    if item.get_closest_marker("serial") and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("stops a shared server: run it without -n (scripts/test runs it alone)")
    # Under --dist loadgroup xdist writes the group into the node id of each marked test;
    # a pytest that drops it spreads a group over every worker, each starting its own
    # session-wide server.
    grouped = getattr(item.config.option, "loadgroup", False)
    if grouped and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail("this pytest and pytest-xdist do not keep --dist loadgroup groups together")
