"""examples/django_orders' own tests, once per Django backend driver, each run in a process
of its own (Django picks its driver once, at import) on a private database and topic:
psycopg 3, and psycopg2 with psycopg hidden from Django (see that conftest)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import TopicFactory
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
async def test_django_example_on_each_backend_driver(
    driver: str, pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("django-orders", partitions=2)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "DJANGO_"))},
        "DATABASE_URL": pg_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "ORDERS_TOPIC": topic,
        "ORDERS_DB_DRIVER": driver,
        # A group of its own: the other driver's run may consume beside this one.
        "CONSUMER_GROUP": f"django-orders-{driver}-{uuid.uuid4().hex[:8]}",
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=-ra --strict-markers",
        "examples/django_orders/tests",
    ]
    result = await asyncio.to_thread(
        subprocess.run, command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "11 passed" in output, output[-3000:]
    assert "skipped" not in output, output[-3000:]
