"""Fixtures for the integration tests: the relay's store on each backend; for consumer_lib,
a prepared Postgres database, each adapter on each database, private topics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relay.store import Store
from relay.transport import kafka as kafka_transport
from tests.conftest import TopicFactory
from tests.support.consumers import consumer_topics, private_backend, with_effects
from tests.support.db import Backend
from tests.support.stores import opened_store


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """The relay's store on this test's own migrated database, open for the test."""
    async with opened_store(backend) as opened:
        yield opened


@pytest.fixture
async def pg_store(pg: Backend) -> AsyncIterator[Store]:
    """The relay's store on this test's own migrated Postgres database, for Postgres-only tests."""
    async with opened_store(pg) as opened:
        yield opened


# (adapter, dialect): PsycopgAsync and the asyncpg and psycopg2 drivers are Postgres only;
# on MariaDB the SQLAlchemy adapters run on aiomysql and PyMySQL, and SqlAlchemySync on
# mysqlclient too.
CASES = [
    ("psycopg_async", "postgres"),
    ("sqlalchemy_async", "postgres"),
    ("sqlalchemy_sync", "postgres"),
    ("sqlalchemy_asyncpg", "postgres"),
    ("sqlalchemy_psycopg2", "postgres"),
    ("sqlalchemy_async", "sqlite"),
    ("sqlalchemy_sync", "sqlite"),
    ("sqlalchemy_async", "mariadb"),
    ("sqlalchemy_sync", "mariadb"),
    ("sqlalchemy_mysqldb", "mariadb"),
]
CASE_IDS = [f"{a}-{d}" for a, d in CASES]


@pytest.fixture
def pg(pg: Backend) -> Backend:
    """A private Postgres database: producer_lib's schema plus consumer_effects."""
    return with_effects(pg)


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Backend]:
    """Each database adapter on each database it supports, on a private prepared database."""
    adapter, dialect = request.param
    return adapter, private_backend(request, dialect, tmp_path)


@pytest.fixture
def patient_kafka_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Kafka publisher gives a new topic's metadata and size limits LOOKUP_WAIT_S
    (0.1 s) and holds its records for the next call when they take longer, as they may on
    a loaded machine. Tests that count what one call or cycle sent wait for them instead."""
    monkeypatch.setattr(kafka_transport, "LOOKUP_WAIT_S", 30.0)


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[TopicFactory]:
    async with consumer_topics(kafka_bootstrap) as make:
        yield make
