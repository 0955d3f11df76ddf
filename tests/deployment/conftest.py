"""Fixtures for the deployment tests: helm, podman and the images, installed and built by
scripts/containers.py when missing (cached in the project's cache folder).

Under xdist every worker has these session fixtures: one lock across processes
(scripts/service_common.machine_lock) makes the first worker install and build while the
others wait, then find everything cached.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import containers
from scripts.service_common import machine_lock


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built once with `go install` from the Go module proxy."""
    try:
        with machine_lock("build"):
            return containers.helm()
    except containers.ContainersError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def podman_ready() -> None:
    """podman and friends installed, the project's podman configuration written."""
    try:
        with machine_lock("build"):
            containers.setup()
    except containers.ContainersError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def relay_image(podman_ready: None) -> str:
    """The project's Dockerfile built on the local python:3.11-slim stand-in."""
    with machine_lock("build"):
        return containers.relay_image()


@pytest.fixture(scope="session")
def standin_images(podman_ready: None) -> dict[str, str]:
    """Local stand-ins for the official postgres and apache/kafka images, and the python base."""
    with machine_lock("build"):
        return {
            "python": containers.python_image(),
            "postgres": containers.postgres_image(),
            "kafka": containers.kafka_image(),
            "kafka_cp": containers.KAFKA_CP_IMAGE,
        }
