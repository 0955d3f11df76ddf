"""The alert rules and the Grafana dashboard of charts/outbox-relay/files/: promtool checks
and unit-tests the rules (each alert firing for one job and silent for its neighbours), the
dashboard is well formed, and the chart renders both from the same files, off by default.

promtool comes from Debian's prometheus package, installed by scripts/service_prometheus.py
when missing; helm from scripts/containers.py. Which metric names the code exports is
checked against live scrapes in tests/acceptance/test_monitoring_live.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scripts import service_prometheus
from scripts.service_common import ServiceError
from tests.deployment.support import CHART, ROOT, helm_template, parse
from tests.support.monitoring import (
    DASHBOARD,
    PROMETHEUS_RULE_SCHEMA,
    RULE_TESTS,
    RULES,
    alerts,
    dashboard,
    dashboard_exprs,
    metric_names,
    panels,
    rule_exprs,
    rules,
)


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return service_prometheus.promtool()
    except (ServiceError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"promtool could not be installed: {exc}")


def run_promtool(
    promtool: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_promtool_accepts_the_rules(promtool: Path) -> None:
    res = run_promtool(promtool, "check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in res.stdout


def test_promtool_refuses_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    """What the check above catches: an expression that does not parse."""
    broken = rules()
    broken["groups"][0]["rules"][0]["expr"] = "max by (job (outbox_relay_pending_rows)"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    res = run_promtool(promtool, "check", "rules", str(path))
    assert res.returncode != 0
    assert "parse error" in res.stdout + res.stderr


def test_the_rule_unit_tests_pass(promtool: Path) -> None:
    res = run_promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def rule_tests() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULE_TESTS.read_text())
    return loaded


def _series_labels(series: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', series))


def _alerted(series: dict[str, str], expected: list[dict[str, Any]]) -> bool:
    """Whether an input series belongs to one of the expected alerts (every label the
    alert and the series share is equal)."""
    for alert in expected:
        shared = set(alert["exp_labels"]) & set(series)
        if shared and all(alert["exp_labels"][k] == series[k] for k in shared):
            return True
    return False


def test_every_alert_has_a_case_firing_and_one_silent() -> None:
    """Each alert fires in some case, and in some case stays silent for an input series
    (another job, instance or topic, or the same one at another time)."""
    fired, silent = set(), set()
    for case in rule_tests()["tests"]:
        inputs = [_series_labels(s["series"]) for s in case["input_series"]]
        for check in case["alert_rule_test"]:
            expected = check["exp_alerts"]
            if expected:
                fired.add(check["alertname"])
            if not all(_alerted(series, expected) for series in inputs):
                silent.add(check["alertname"])
    assert fired == set(alerts()), set(alerts()) - fired
    assert silent == set(alerts()), set(alerts()) - silent


@pytest.mark.parametrize("name", sorted(alerts()))
def test_the_unit_tests_fail_without_each_alert(promtool: Path, tmp_path: Path, name: str) -> None:
    """Each alert's firing case really depends on it: with the rule removed (or its
    threshold raised out of reach) promtool's unit tests fail."""
    without = rules()
    for group in without["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != name]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(without))
    tests = rule_tests()
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    res = run_promtool(promtool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert f"alertname: {name}" in res.stdout + res.stderr


def test_the_dashboard_is_well_formed() -> None:
    dash = dashboard()
    assert dash["uid"]
    assert dash["title"]
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource"
    for panel in panels(dash):
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert metric_names(target["expr"]), (panel["title"], target["expr"])
    cells = [
        (x, y)
        for panel in dash["panels"]
        for x in range(panel["gridPos"]["x"], panel["gridPos"]["x"] + panel["gridPos"]["w"])
        for y in range(panel["gridPos"]["y"], panel["gridPos"]["y"] + panel["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells)), "panels overlap"
    # Relay and consumer panels both.
    used = set().union(*(metric_names(e) for e in dashboard_exprs().values()))
    assert any(n.startswith("outbox_relay_") for n in used)
    assert any(n.startswith("outbox_consumer_") for n in used)


def test_metric_names_are_read_from_expressions() -> None:
    """The extraction the live check relies on: names only, label values are not names."""
    assert metric_names(
        'sum by (topic) (rate(outbox_consumer_dead_lettered_total{job="outbox_x"}[5m]))'
        " / on(job) outbox_relay_ready"
    ) == {"outbox_consumer_dead_lettered_total", "outbox_relay_ready"}
    for expr in rule_exprs().values():
        assert metric_names(expr), expr


# --------------------------------------------------------------------------- the chart

ON = [
    "metrics.prometheusRule.enabled=true",
    "metrics.prometheusRule.labels.release=prometheus",
    "metrics.dashboard.enabled=true",
    "metrics.dashboard.annotations.grafana_folder=Outbox",
]


def test_monitoring_objects_are_off_by_default(helm: Path) -> None:
    for values in ("default", "sasl-tls"):
        rendered = parse(
            helm_template(helm, CHART, [CHART / "ci" / f"{values}-values.yaml"]).stdout
        )
        kinds = [d["kind"] for d in rendered.docs]
        assert "PrometheusRule" not in kinds
        assert "ConfigMap" not in kinds


def test_the_chart_renders_the_rule_file_and_the_dashboard(
    helm: Path, promtool: Path, tmp_path: Path
) -> None:
    rendered = parse(
        helm_template(helm, CHART, [CHART / "ci" / "default-values.yaml"], set_values=ON).stdout
    )
    [rule] = rendered.of_kind("PrometheusRule")
    jsonschema.validate(rule, PROMETHEUS_RULE_SCHEMA)
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == rules()  # the same file, whole
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(rule["spec"]))
    res = run_promtool(promtool, "check", "rules", str(spec))
    assert res.returncode == 0, res.stdout + res.stderr

    [config_map] = rendered.of_kind("ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Outbox"}
    [(key, text)] = config_map["data"].items()
    assert key == DASHBOARD.name
    assert json.loads(text) == dashboard()


def test_sidecar_mode_renders_no_monitoring_objects(helm: Path) -> None:
    rendered = parse(
        helm_template(helm, CHART, [CHART / "ci" / "sidecar-values.yaml"], set_values=ON).stdout
    )
    assert rendered.docs == []


@pytest.mark.parametrize(
    "bad",
    [
        "metrics.prometheusRule.enable=true",
        "metrics.dashboard.enabled=yes",
        "metrics.dashboard.labels.grafana_dashboard=1",  # a number: label values are strings
    ],
)
def test_the_values_schema_refuses_bad_monitoring_values(helm: Path, bad: str) -> None:
    res = helm_template(
        helm, CHART, [CHART / "ci" / "default-values.yaml"], set_values=[bad], check=False
    )
    assert res.returncode != 0, res.stdout[:2000]
    assert "values don't meet the specifications of the schema" in res.stderr, res.stderr


def test_the_user_docs_list_exactly_the_shipped_alerts() -> None:
    text = (ROOT / "docs" / "monitoring.md").read_text()
    documented = set(re.findall(r"^\| `(Outbox\w+)` \|", text, re.M))
    assert documented == set(alerts())
