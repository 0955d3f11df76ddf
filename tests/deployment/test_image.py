"""The Dockerfile's image, run for real with podman against the test Postgres and Kafka:
it migrates, publishes an event emitted by producer_lib, reports ready on /readyz, runs as
the non-root user on a read-only root file system and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from producer_lib import Outbox
from scripts import containers
from scripts.ports import reserved_port
from tests.conftest import TopicFactory
from tests.support.kafka import read_topic

# Cold, the fixtures debootstrap a base and build the image first (a few minutes).
pytestmark = [pytest.mark.integration, pytest.mark.containers, pytest.mark.timeout(1200)]


def podman(
    *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        ["podman", *args],
        env=containers.podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and res.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{res.stdout}{res.stderr}")
    return res


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


@contextlib.contextmanager
def container(name: str) -> Iterator[str]:
    try:
        yield name
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_image_has_both_entrypoints_and_reports_its_size(relay_image: str) -> None:
    inspect = json.loads(podman("image", "inspect", relay_image).stdout)[0]
    config = inspect["Config"]
    assert config["Entrypoint"] == ["outbox-relay"]
    assert config["Cmd"] == ["run"]
    assert config["User"] == "10001:10001"
    assert not any("PASSWORD" in e or "DATABASE_URL" in e for e in config.get("Env", []))
    help_text = podman("run", "--rm", "--read-only", relay_image, "--help").stdout
    assert "migrate" in help_text
    assert "run" in help_text
    consumer = podman(
        "run", "--rm", "--read-only", "--entrypoint", "outbox-consumer", relay_image, "--help"
    )
    assert "run" in consumer.stdout
    size = containers.image_size(relay_image)
    base = containers.image_size(containers.PYTHON_IMAGE)
    print(
        f"\nimage {relay_image}: {size / 1e6:.1f} MB, of which the base "
        f"{containers.PYTHON_IMAGE} {base / 1e6:.1f} MB; the relay's layers {(size - base) / 1e6:.1f} MB"
    )
    assert size - base < 150e6, "the relay's own layers grew past 150 MB"


def test_the_image_migrates_a_mariadb_outbox(relay_image: str, mariadb_url: str) -> None:
    """The image carries the MariaDB drivers and migrations: a mysql:// URL works as is."""
    migrated = podman(
        "run", "--rm", "--read-only", "--network=host",
        "-e", f"OUTBOX_DATABASE_URL={mariadb_url}",
        relay_image, "migrate", "--shard-count", "8",
    )  # fmt: skip
    assert "shard_count 8" in migrated.stdout
    assert mariadb_url.split("@")[0].split(":")[-1] not in migrated.stdout + migrated.stderr


async def test_relay_container_migrates_publishes_and_stops_cleanly(
    relay_image: str, pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    # 1. migrate, as the chart's hook Job and the compose file run it
    migrated = podman(
        "run", "--rm", "--read-only", "--network=host",
        "-e", f"OUTBOX_DATABASE_URL={pg_url}",
        relay_image, "migrate", "--shard-count", "8",
    )  # fmt: skip
    assert "shard_count 8" in migrated.stdout

    # 2. an event, emitted in the test's own transaction
    topic = await new_topic("image", partitions=2)
    event_key = f"order-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url) as conn, conn.transaction():
        event_id = Outbox(shard_count=8).emit(
            conn, topic=topic, key=event_key, event_type="OrderPlaced", payload={"n": 1}
        )

    # 3. the relay, in the container, until it has published and answers /readyz
    port = reserved_port()
    name = f"outbox-relay-test-{uuid.uuid4().hex[:8]}"
    with container(name):
        podman(
            "run", "-d", "--name", name, "--read-only", "--network=host",
            "-e", f"OUTBOX_DATABASE_URL={pg_url}",
            "-e", f"OUTBOX_KAFKA_BOOTSTRAP_SERVERS={kafka_bootstrap}",
            "-e", "OUTBOX_KAFKA_SECURITY_PROTOCOL=PLAINTEXT",
            "-e", "OUTBOX_SHARD_COUNT=8",
            "-e", f"OUTBOX_HTTP_PORT={port}",
            relay_image,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        status, body = readyz(port)
        while status != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            status, body = readyz(port)
        assert status == 200, f"/readyz: {status} {body}\n{podman('logs', name).stderr}"

        records = await read_topic(kafka_bootstrap, topic)
        deadline = time.monotonic() + 30
        while not records and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            records = await read_topic(kafka_bootstrap, topic)
        assert [(r.key, r.header("event_id")) for r in records] == [
            (event_key.encode(), str(event_id).encode())
        ]

        # 4. who it runs as, and what it may write
        assert podman("exec", name, "id", "-u").stdout.strip() == "10001"
        touched = podman("exec", name, "touch", "/opt/venv/written", check=False)
        assert touched.returncode != 0
        assert "Read-only file system" in touched.stderr
        state = json.loads(podman("inspect", name).stdout)[0]
        assert state["HostConfig"]["ReadonlyRootfs"] is True

        # 5. SIGTERM: drain, release the leases, exit 0
        podman("stop", "-t", "60", name, timeout=90)
        state = json.loads(podman("inspect", name).stdout)[0]["State"]
        logs = podman("logs", name).stderr + podman("logs", name).stdout
        assert state["ExitCode"] == 0, logs
        assert "relay stopped" in logs
