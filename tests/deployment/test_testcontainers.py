"""The fixtures' testcontainers fallback (tests/support/services.py), for users who have a
Docker engine and no local Postgres or Kafka: podman serves a Docker-compatible API here,
and the smoke test runs through it with DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS unset,
its Postgres and Kafka in containers of the locally built stand-in images."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import containers
from tests.deployment.support import ROOT

# Cold, the fixtures build the stand-in images first (a few minutes).
pytestmark = [pytest.mark.containers, pytest.mark.timeout(1200)]


@pytest.fixture
def docker_api(podman_ready: None, tmp_path: Path) -> Iterator[str]:
    """`podman system service` on a private unix socket; DOCKER_HOST for it."""
    sock = tmp_path / "podman.sock"
    log = (tmp_path / "podman-service.log").open("wb")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=containers.podman_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, (tmp_path / "podman-service.log").read_text()
            assert time.monotonic() < deadline, "podman system service did not create its socket"
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_smoke_test_through_testcontainers(
    docker_api: str, standin_images: dict[str, str], tmp_path: Path
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS", "OUTBOX_SERVICES_MANAGED")
    }
    env.update(
        DOCKER_HOST=docker_api,
        TESTCONTAINERS_RYUK_DISABLED="true",  # Ryuk needs an image from a registry
        # These machines have a /.dockerenv, so testcontainers would take itself for a
        # container in a container and connect to a gateway address; podman runs right here.
        TESTCONTAINERS_CONNECTION_MODE="docker_host",
        OUTBOX_TEST_POSTGRES_IMAGE=standin_images["postgres"],
        OUTBOX_TEST_KAFKA_IMAGE=standin_images["kafka_cp"],
    )
    res = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "tests/integration/test_smoke.py::test_row_goes_through_postgres_and_kafka",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    output = res.stdout[-6000:] + res.stderr[-3000:]
    assert res.returncode == 0, output
    assert "1 passed" in res.stdout, output
    # testcontainers removed its containers (no Ryuk: the fixtures' context managers did).
    # Only the containers it labels: other tests run stand-in images beside this one.
    left = subprocess.run(
        [
            "podman",
            "ps",
            "-a",
            "--filter",
            "label=org.testcontainers=true",
            "--format",
            "{{.Image}}",
        ],
        env=containers.podman_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert standin_images["postgres"] not in left
    assert standin_images["kafka_cp"] not in left
