"""charts/outbox-relay: lint, render, Kubernetes API schemas, the restricted Pod Security
Standard, the relay's own settings model, and values.schema.json refusing bad values.

helm itself comes from scripts/containers.py (go install, cached)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deployment.support import (
    CHART,
    KUBE_VERSION,
    PLACEHOLDER_POD_IP,
    ROOT,
    Rendered,
    assert_env_is_relay_settings,
    example_app,
    helm_template,
    parse,
    resolved_env,
    restricted_violations,
)
from tests.support.monitoring import PROMETHEUS_RULE_SCHEMA

# Cold, the helm fixture builds helm with `go install` first (about five minutes).
pytestmark = pytest.mark.timeout(1800)

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
CASES = [p.stem.removesuffix("-values") for p in CI_VALUES] + ["app-with-sidecar"]


def render(helm: Path, case: str, tmp_path: Path) -> Rendered:
    if case == "app-with-sidecar":
        return parse(helm_template(helm, example_app(tmp_path)).stdout)
    return parse(helm_template(helm, CHART, [CHART / "ci" / f"{case}-values.yaml"]).stdout)


def relay_containers(rendered: Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every relay container (`outbox-relay run`)."""
    found = []
    for _, pod in rendered.pods():
        for c in pod["containers"]:
            if c["name"] == "outbox-relay":
                found.append((pod, c))
    return found


# A structural schema for the one custom resource the chart renders (the Prometheus
# Operator's CRD is not part of the Kubernetes API schemas): the fields the chart sets.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                            "scrapeTimeout": {
                                "type": "string",
                                "pattern": "^([0-9]+(ms|s|m|h))+$",
                            },
                        },
                    },
                },
            },
        },
    },
}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_helm_lint(helm: Path, values: Path) -> None:
    res = subprocess.run(
        [
            str(helm),
            "lint",
            str(CHART),
            "--strict",
            "--kube-version",
            KUBE_VERSION,
            "-f",
            str(values),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_helm_lint_example_app(helm: Path, tmp_path: Path) -> None:
    app = example_app(tmp_path)
    res = subprocess.run(
        [str(helm), "lint", str(app), "--strict", "--kube-version", KUBE_VERSION],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("case", CASES)
def test_every_object_is_valid_for_the_kubernetes_api(
    helm: Path, case: str, tmp_path: Path
) -> None:
    rendered = render(helm, case, tmp_path)
    if case == "sidecar":
        assert rendered.docs == [], "sidecar mode renders nothing of its own"
        return
    assert rendered.docs
    for doc in rendered.docs:
        if doc["kind"] == "ServiceMonitor":
            jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
            continue
        if doc["kind"] == "PrometheusRule":
            jsonschema.validate(doc, PROMETHEUS_RULE_SCHEMA)
            continue
        # strict: a field the API does not know is an error too.
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("case", CASES)
def test_every_pod_meets_the_restricted_pod_security_standard(
    helm: Path, case: str, tmp_path: Path
) -> None:
    pods = list(render(helm, case, tmp_path).pods())
    if case == "sidecar":
        assert pods == []
        return
    assert pods
    problems = {name: restricted_violations(pod) for name, pod in pods}
    assert not any(problems.values()), problems


def test_the_pss_check_catches_violations() -> None:
    """The checker itself: each weakening of a good pod is reported."""
    good: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    assert restricted_violations(good) == []
    weakenings: list[Callable[[dict[str, Any]], object]] = [
        lambda p: p["securityContext"].pop("runAsNonRoot"),
        lambda p: p["securityContext"]["seccompProfile"].update(type="Unconfined"),
        lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
        lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
        lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        lambda p: p["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False),
        lambda p: p["containers"][0]["securityContext"].update(runAsUser=0),
        lambda p: p.update(hostNetwork=True),
        lambda p: p.update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        lambda p: p["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
    ]
    for weaken in weakenings:
        pod = yaml.safe_load(yaml.safe_dump(good))
        weaken(pod)
        assert restricted_violations(pod), pod


@pytest.mark.parametrize("case", [c for c in CASES if c != "sidecar"])
def test_relay_env_is_the_relays_own_settings(
    helm: Path, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every relay container's environment loads through relay.config.load_settings, and
    every OUTBOX_* variable in it is a setting the relay reads."""
    found = relay_containers(render(helm, case, tmp_path))
    assert found, "no relay container rendered"
    for pod, container in found:
        assert container["args"] == ["run"]
        env = resolved_env(pod, container, tmp_path / "files")
        settings = assert_env_is_relay_settings(monkeypatch, env)
        # Bound on the pod's IP (what probes and Prometheus reach), never on 0.0.0.0.
        assert settings.http.host == PLACEHOLDER_POD_IP
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "relay-http")
        assert settings.http.port == port
        for probe in ("livenessProbe", "readinessProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["port"] == "relay-http"
        security = settings.kafka_security.resolve()
        assert security.protocol in ("SSL", "SASL_SSL")
        if security.protocol == "SASL_SSL":
            assert security.sasl_password == "placeholder for password"  # read from the file


def test_sasl_tls_settings_reach_the_relay(
    helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(pod, container)] = relay_containers(render(helm, "sasl-tls", tmp_path))
    settings = assert_env_is_relay_settings(
        monkeypatch, resolved_env(pod, container, tmp_path / "files")
    )
    security = settings.kafka_security.resolve()
    assert security.sasl_mechanism == "SCRAM-SHA-512"
    assert security.sasl_username == "outbox-relay"
    assert security.ssl_cafile
    assert security.ssl_cafile.endswith("kafka-ca/ca.crt")
    assert security.ssl_certfile
    assert security.ssl_keyfile
    assert settings.shard_count == 32
    assert settings.batch.batch_size == 1000
    assert settings.topics.kafka_topic("orders") == "prod.prod.orders-v2"
    assert settings.leases.replica_id == "outbox-relay-7d9f8-abcde"  # the pod's name
    # The password never appears in the pod spec, only its file's path.
    assert "placeholder" not in yaml.safe_dump(pod)


def test_a_renamed_setting_breaks_the_build(
    helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the check above guards against: an env name the relay does not know."""
    [(pod, container)] = relay_containers(render(helm, "default", tmp_path))
    env = resolved_env(pod, container, tmp_path / "files")
    env["OUTBOX_BATCHSIZE"] = "900"  # a typo / an old name: pydantic-settings ignores it
    with pytest.raises(AssertionError, match="OUTBOX_BATCHSIZE"):
        assert_env_is_relay_settings(monkeypatch, env)
    del env["OUTBOX_BATCHSIZE"]
    env["OUTBOX_KAFKA_SECURITY_PROTOCOL"] = "TLS"  # a value the relay refuses
    with pytest.raises(AssertionError, match="rejects"):
        assert_env_is_relay_settings(monkeypatch, env)


def test_migrate_job_runs_against_a_real_database(helm: Path, pg_url: str) -> None:
    """The hook Job's exact command and environment, run for real."""
    rendered = parse(helm_template(helm, CHART, [CHART / "ci" / "sasl-tls-values.yaml"]).stdout)
    [job] = rendered.of_kind("Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {"PATH": "/usr/bin:/bin"}
    for item in container["env"]:
        assert item["valueFrom"]["secretKeyRef"]["name"] == "outbox-db"
        env[item["name"]] = pg_url
    res = subprocess.run(
        [sys.executable, "-m", "relay.cli", *container["args"]],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "shard_count 32" in res.stdout


def test_consumer_args_are_real_cli_arguments(helm: Path, tmp_path: Path) -> None:
    rendered = parse(helm_template(helm, CHART, [CHART / "ci" / "metrics-values.yaml"]).stdout)
    consumer = next(
        d for d in rendered.of_kind("Deployment") if d["metadata"]["name"].endswith("-consumer")
    )
    [container] = consumer["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["outbox-consumer"]
    args = list(container["args"])
    assert args[1] == "billing.consumers:build"
    args[1] = "no_such_module_for_the_test:build"  # the CLI parses everything, then imports
    res = subprocess.run(
        [sys.executable, "-m", "consumer_lib.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert "usage:" not in res.stderr, res.stderr  # argparse accepted every argument
    assert "cannot import 'no_such_module_for_the_test'" in res.stderr


def test_deployment_mode_objects(helm: Path, tmp_path: Path) -> None:
    rendered = render(helm, "default", tmp_path)
    kinds = sorted(d["kind"] for d in rendered.docs)
    assert kinds == ["Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount"]
    [pdb] = rendered.of_kind("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    [deployment] = rendered.of_kind("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    metrics = render(helm, "metrics", tmp_path / "m")
    assert [d["kind"] for d in metrics.of_kind("ServiceMonitor")] == ["ServiceMonitor"]
    pdbs = {d["metadata"]["name"]: d["spec"] for d in metrics.of_kind("PodDisruptionBudget")}
    assert pdbs["rel-outbox-relay"]["minAvailable"] == 1
    assert "maxUnavailable" not in pdbs["rel-outbox-relay"]
    assert pdbs["rel-outbox-relay-consumer"]["maxUnavailable"] == 1


def test_sidecar_example_puts_the_relay_into_the_app_pod(helm: Path, tmp_path: Path) -> None:
    rendered = render(helm, "app-with-sidecar", tmp_path)
    assert [d["kind"] for d in rendered.docs] == ["Deployment"]  # no Job, PDB or Service
    [(_, pod)] = rendered.pods()
    assert [c["name"] for c in pod["containers"]] == ["orders", "outbox-relay"]
    relay = pod["containers"][1]
    assert "readinessProbe" not in relay  # a Kafka outage must not unready the app
    env = {e["name"]: e.get("value") for e in relay["env"]}
    # One sidecar among the app's pods holds the shards; the others stand by.
    assert env["OUTBOX_ACTIVE_REPLICAS"] == "1"
    assert relay["livenessProbe"]["httpGet"]["path"] == "/healthz"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["outbox-relay-kafka-ca"]["configMap"]["name"] == "kafka-ca"
    assert volumes["outbox-relay-kafka-sasl"]["secret"]["defaultMode"] == 0o440


def test_app_version_is_the_projects(helm: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    match = re.search(r'define "outbox-relay.appVersion" -}}([^{]+){{', helpers)
    assert match
    assert match.group(1) == chart["appVersion"]
    project = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert project
    assert project.group(1) == chart["appVersion"]


BAD_VALUES = {
    "unknown protocol": ["kafka.securityProtocol=TLS"],
    "replicas not a number": ["replicaCount=three"],
    "misspelt key": ["replicas=3"],
    "broker without a port": ["kafka.bootstrapServers=kafka"],
    "a chart-owned setting in settings": ["settings.database_url=sqlite:///x.db"],
    "SASL without a username": ["kafka.securityProtocol=SASL_SSL"],
    "SASL settings with SSL": ["kafka.sasl.username=relay"],
    "CA from both a Secret and a ConfigMap": [
        "kafka.ssl.ca.secretName=a",
        "kafka.ssl.ca.configMapName=b",
    ],
    "unknown mode": ["mode=daemonset"],
    "consumer without an app": ["consumer.enabled=true"],
    "shard count out of range": ["shardCount=0"],
    "a bad port": ["http.port=70000"],
    "negative active sidecars": ["sidecar.activeReplicas=-1"],
    "active sidecars not a number": ["sidecar.activeReplicas=one"],
}


@pytest.mark.parametrize("name", BAD_VALUES)
def test_values_schema_rejects_bad_values(helm: Path, name: str) -> None:
    res = helm_template(
        helm,
        CHART,
        [CHART / "ci" / "default-values.yaml"],
        set_values=BAD_VALUES[name],
        check=False,
    )
    assert res.returncode != 0, f"{name}: rendered:\n{res.stdout[:2000]}"
    assert "values don't meet the specifications of the schema" in res.stderr, res.stderr


def test_required_values_are_named_when_missing(helm: Path) -> None:
    res = helm_template(helm, CHART, check=False)
    assert res.returncode != 0
    assert "values don't meet the specifications of the schema" in res.stderr
    for field in ("existingSecret", "bootstrapServers"):
        assert field in res.stderr, res.stderr


def test_the_sidecar_is_checked_by_the_subchart_schema(helm: Path, tmp_path: Path) -> None:
    app = example_app(tmp_path)
    res = helm_template(
        helm, app, set_values=["outboxRelay.kafka.securityProtocol=TLS"], check=False
    )
    assert res.returncode != 0
    assert "values don't meet the specifications of the schema" in res.stderr, res.stderr
