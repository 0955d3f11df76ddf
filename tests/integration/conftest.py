"""Fixtures for the integration tests: the relay's store on each backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from relay.store import Store
from tests.support.db import Backend
from tests.support.stores import opened_store


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """The relay's store on this test's own migrated database, open for the test."""
    async with opened_store(backend) as opened:
        yield opened
