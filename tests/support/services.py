"""Where the tests find Postgres and Kafka.

Environment first (scripts/services up prints the variables); testcontainers only where a
Docker engine answers, which is never the case on this project's CI machines.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

# The images the fallback runs; the deployment tests point them at locally built stand-ins
# (tests/deployment/images) where no registry is reachable.
POSTGRES_IMAGE = os.environ.get("OUTBOX_TEST_POSTGRES_IMAGE", "postgres:15")
KAFKA_IMAGE = os.environ.get("OUTBOX_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.0")


def _loopback_only(container: Any) -> None:
    """Publish the container's port on the host's loopback only (docker-py's (ip,) form)."""
    container.ports[str(container.port)] = ("127.0.0.1",)


_NO_SERVICE = (
    "{var} is not set and no Docker engine is available for testcontainers. "
    'Run `scripts/services up` and `eval "$(scripts/services env)"`, or use scripts/test.'
)


def docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@contextlib.contextmanager
def postgres_admin_url() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    if not docker_available():
        raise RuntimeError(_NO_SERVICE.format(var="DATABASE_URL"))
    from testcontainers.postgres import PostgresContainer

    container: Any = PostgresContainer(POSTGRES_IMAGE, driver=None)
    _loopback_only(container)
    with container:
        yield str(container.get_connection_url())


@contextlib.contextmanager
def kafka_bootstrap_servers() -> Iterator[str]:
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if servers:
        yield servers
        return
    if not docker_available():
        raise RuntimeError(_NO_SERVICE.format(var="KAFKA_BOOTSTRAP_SERVERS"))
    from testcontainers.kafka import KafkaContainer

    container: Any = KafkaContainer(KAFKA_IMAGE).with_kraft()
    _loopback_only(container)
    # Its JVM starts slowly while other tests keep the machine's cores busy.
    container.start(timeout=180)
    try:
        yield str(container.get_bootstrap_server())
    finally:
        container.stop()


def managed_services() -> bool:
    """True when scripts/services runs the servers, so a test may stop and start them."""
    return os.environ.get("OUTBOX_SERVICES_MANAGED") == "1"


def services(*args: str) -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "services.py"
    # With these set, the script only checks the servers they name and starts nothing;
    # a test that stopped a managed server needs the script to start it again.
    given = ("DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "MARIADB_URL")
    env = {k: v for k, v in os.environ.items() if k not in given}
    subprocess.run(
        [sys.executable, str(script), *args], check=True, capture_output=True, timeout=180, env=env
    )
