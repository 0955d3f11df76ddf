"""docker-compose.yml: its settings are the relay's own, it keeps the official images and
health-gated start order, and (with podman-compose and local stand-in images) the whole
demo round trip runs: events emitted, relayed, applied exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import containers
from tests.deployment.support import ROOT, assert_env_is_relay_settings

COMPOSE = ROOT / "docker-compose.yml"
OVERRIDE = ROOT / "tests" / "deployment" / "compose.local-images.yml"


def compose_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_relay_env_is_the_relays_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose_file()["services"]
    relay = services["relay"]
    assert relay["command"] == ["run"]
    settings = assert_env_is_relay_settings(monkeypatch, service_env(relay))
    assert settings.http.host == "0.0.0.0"
    assert settings.database.url.dialect == "postgres"
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    # the migrate job uses the same database
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"]
    assert service_env(migrate)["OUTBOX_DATABASE_URL"] == service_env(relay)["OUTBOX_DATABASE_URL"]


def test_compose_keeps_official_images_and_health_gated_order() -> None:
    services = compose_file()["services"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["kafka"]["image"].startswith("apache/kafka:")
    for name in ("postgres", "kafka", "relay", "demo-consumer"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    healthy = {n for n, s in services.items() if "healthcheck" in s}
    for name, service in services.items():
        for dep, spec in (service.get("depends_on") or {}).items():
            condition = spec["condition"]
            if dep in healthy:
                assert condition == "service_healthy", (name, dep)
            elif dep == "migrate":
                assert condition == "service_completed_successfully", (name, dep)
    for name in ("migrate", "relay", "demo-producer", "demo-consumer", "demo-check"):
        assert services[name]["read_only"] is True, name
        assert services[name]["image"] == "outbox-relay:local"
    # The override used by the container test only swaps images (and unpublishes a port).
    override = OVERRIDE.read_text()
    assert "localhost/outbox-relay-ci/postgres" in override
    assert "environment" not in override
    assert "command" not in override


# --------------------------------------------------------------------------- for real


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        ["podman", *args],
        env=containers.podman_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and res.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}:\n{res.stdout}{res.stderr}")
    return res


class Compose:
    def __init__(self, project: str, python_image: str) -> None:
        self.project = project
        self.env = containers.podman_env()
        self.env["BASE_IMAGE"] = python_image  # the Dockerfile's base: the local stand-in

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "podman_compose", "-p", self.project]
        cmd += ["-f", str(COMPOSE), "-f", str(OVERRIDE), *args]
        return subprocess.run(
            cmd,
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def state(self, service: str) -> dict[str, Any]:
        res = podman("inspect", self.container(service), check=False)
        if res.returncode != 0:
            return {}
        state: dict[str, Any] = json.loads(res.stdout)[0]["State"]
        return state

    def logs(self, service: str) -> str:
        res = podman("logs", self.container(service), check=False)
        return res.stdout + res.stderr


SERVICES = ("postgres", "kafka", "migrate", "relay", "demo-producer", "demo-consumer", "demo-check")


# Cold, the fixtures debootstrap a base and build four images first (several minutes).
@pytest.mark.containers
@pytest.mark.timeout(1500)
def test_compose_round_trip(standin_images: dict[str, str], tmp_path: Path) -> None:
    compose = Compose(f"outbox-ci-{uuid.uuid4().hex[:8]}", standin_images["python"])
    t0 = time.monotonic()
    # --no-deps: podman 4.3 cannot start a container whose --requires chain is two deep
    # (relay -> migrate -> postgres); podman-compose ignores the health conditions anyway,
    # and every service retries its connections, so start order does not matter.
    up = compose("up", "-d", "--build", "--no-deps")
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = compose.state("demo-check")
            if state.get("Status") == "exited":
                break
            time.sleep(1)
        check = compose.logs("demo-check")
        assert compose.state("demo-check").get("ExitCode") == 0, check
        assert "round trip complete: 50 orders emitted" in check
        assert "50 invoices applied exactly once" in check
        assert "most invoices for one order: 1" in check
        print(f"\ncompose round trip in {time.monotonic() - t0:.1f}s: {check.strip()}")

        # the one-shot migrate finished, the long-running services are up and healthy:
        # podman-compose does not run health checks, so run each service's by hand.
        assert compose.state("migrate").get("ExitCode") == 0
        assert compose.state("demo-producer").get("ExitCode") == 0
        for service in ("postgres", "kafka", "relay", "demo-consumer"):
            res = podman("healthcheck", "run", compose.container(service), check=False)
            assert res.returncode == 0, f"{service} health check: {res.stdout}{res.stderr}"
        assert "50 orders written" in compose.logs("demo-producer")
        assert compose.logs("demo-consumer").count("demo-consumer: invoiced order") == 50
        relay = json.loads(podman("inspect", compose.container("relay")).stdout)[0]
        assert relay["HostConfig"]["ReadonlyRootfs"] is True
        assert podman("exec", compose.container("relay"), "id", "-u").stdout.strip() == "10001"
    except BaseException:
        for service in SERVICES:
            print(
                f"----- {service}: {compose.state(service).get('Status')}\n{compose.logs(service)[-3000:]}"
            )
        raise
    finally:
        down = compose("down", "-t", "5", timeout=180)
        assert down.returncode == 0, down.stderr[-2000:]
