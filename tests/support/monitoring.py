"""The shipped alert rules and dashboard (charts/outbox-relay/files/), read as data: their
PromQL expressions, the metric names those name, and the series a /metrics scrape exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "charts" / "outbox-relay" / "files"
RULES = FILES / "outbox-alerts.yaml"
DASHBOARD = FILES / "outbox-dashboard.json"
RULE_TESTS = ROOT / "tests" / "deployment" / "monitoring" / "outbox-alerts.test.yaml"

# Every metric of the project starts with this; Prometheus' own (up, ALERTS) do not.
_METRIC = re.compile(r"\boutbox_[a-zA-Z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
# Series a family of each type exposes (the OpenMetrics suffixes prometheus_client writes).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}


def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def alerts() -> dict[str, dict[str, Any]]:
    """Every alerting rule of the rule file by name."""
    return {r["alert"]: r for g in rules()["groups"] for r in g["rules"] if "alert" in r}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found = []
    for panel in dash["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_exprs(dash: dict[str, Any] | None = None) -> dict[str, str]:
    """Every PromQL expression of the dashboard: panel targets and template variables."""
    dash = dash or dashboard()
    exprs = {}
    for panel in panels(dash):
        for target in panel.get("targets", []):
            exprs[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            exprs[f"variable {var['name']}"] = query["query"] if isinstance(query, dict) else query
    return exprs


def rule_exprs() -> dict[str, str]:
    return {f"alert {name}": rule["expr"] for name, rule in alerts().items()}


def metric_names(expr: str) -> set[str]:
    """The outbox_* metric names a PromQL expression (or label_values query) selects;
    string literals (label matchers' values) are not names."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))


def exported_series(scrape_text: str) -> set[str]:
    """Every series name a /metrics text can hold: each family declared in it (with or
    without samples yet: a labelled counter has none before its first event), expanded
    with its type's suffixes."""
    names: set[str] = set()
    for family in text_string_to_metric_families(scrape_text):
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def missing(used: dict[str, str], exported: Iterable[str]) -> dict[str, set[str]]:
    """For each expression naming a metric the scrape does not export, those names."""
    have = set(exported)
    gaps = {where: metric_names(expr) - have for where, expr in used.items()}
    return {where: names for where, names in gaps.items() if names}


def substitute_dashboard_vars(expr: str, rate_interval: str = "1m") -> str:
    """A dashboard expression as Grafana would send it with every variable on All."""
    for name in ("namespace", "relay_job", "consumer_job"):
        expr = expr.replace(f"${name}", ".*")
    return expr.replace("$__rate_interval", rate_interval)


# A structural schema for the Prometheus Operator's PrometheusRule (its CRD is not part of
# the Kubernetes API schemas): the fields a rule group and a rule may have.
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "labels"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": "string"},
                                        "for": {"type": "string"},
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
