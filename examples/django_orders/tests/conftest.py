"""The example's tests run against the Postgres of DATABASE_URL and the Kafka of
KAFKA_BOOTSTRAP_SERVERS, on the topic ORDERS_TOPIC (created when missing). They migrate the
database (the outbox schema with `outbox-relay migrate`, the app's tables with Django's
migrate) and run a relay beside themselves.

ORDERS_DB_DRIVER=psycopg2 runs Django on psycopg2: Django's postgresql backend uses
psycopg 3 whenever it can import it, so psycopg is hidden from this process before Django
loads its backend (every library here then uses psycopg2 too).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

if os.environ.get("ORDERS_DB_DRIVER") == "psycopg2":
    sys.modules["psycopg"] = None  # type: ignore[assignment]  # an import of it now fails

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_orders.orders_project.settings")

import django

django.setup()

import pytest  # noqa: E402
from django.core.management import call_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _relay_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(
        OUTBOX_DATABASE_URL=os.environ["DATABASE_URL"],
        OUTBOX_KAFKA_BOOTSTRAP_SERVERS=os.environ["KAFKA_BOOTSTRAP_SERVERS"],
        OUTBOX_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        # Its ops endpoint on any free port: the example's tests may run beside others.
        OUTBOX_HTTP_PORT="0",
    )
    return env


def _relay(*args: str) -> list[str]:
    return [sys.executable, "-m", "relay.cli", *args]


@pytest.fixture(scope="session", autouse=True)
def migrated() -> None:
    subprocess.run(_relay("migrate"), env=_relay_env(), cwd=ROOT, check=True, timeout=120)
    call_command("migrate", verbosity=0)


@pytest.fixture(scope="session")
def relay(migrated: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`outbox-relay run` beside the tests, publishing what they emit."""
    log = tmp_path_factory.mktemp("relay") / "relay.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            _relay("run"), env=_relay_env(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield
    finally:
        proc.terminate()
        code = proc.wait(60)
        assert code == 0, log.read_text()[-3000:]
