"""Fixtures for the deployment tests: helm, podman and the images, installed and built by
scripts/containers.py when missing (cached in the project's cache folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import containers


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built once with `go install` from the Go module proxy."""
    try:
        return containers.helm()
    except containers.ContainersError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def podman_ready() -> None:
    """podman and friends installed, the project's podman configuration written."""
    try:
        containers.setup()
    except containers.ContainersError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def relay_image(podman_ready: None) -> str:
    """The project's Dockerfile built on the local python:3.11-slim stand-in."""
    return containers.relay_image()


@pytest.fixture(scope="session")
def standin_images(podman_ready: None) -> dict[str, str]:
    """Local stand-ins for the official postgres and apache/kafka images, and the python base."""
    return {
        "python": containers.python_image(),
        "postgres": containers.postgres_image(),
        "kafka": containers.kafka_image(),
        "kafka_cp": containers.KAFKA_CP_IMAGE,
    }
