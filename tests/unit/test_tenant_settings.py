"""Fair turns between tenants without a database: the settings (env, flags, errors), what
the cycle asks the store for, and the per-tenant gauges' bounded label set."""

from __future__ import annotations

import traceback
from typing import Any

import pytest
from prometheus_client import generate_latest

from relay.cli import _run_overrides, build_parser
from relay.config import load_settings
from relay.errors import RelayConfigError
from relay.ops.observer import RelayObserver
from relay.store import TenantBacklog, TenantTurns

GOOD: dict[str, Any] = {
    "database_url": "postgresql://relay:secret-pw@db.internal:5432/outbox",
    "kafka_bootstrap_servers": "127.0.0.1:9092",
    "kafka_security_protocol": "PLAINTEXT",
}


def test_fairness_is_off_by_default_and_the_claim_is_the_plain_one() -> None:
    settings = load_settings(**GOOD)
    assert settings.tenants.fair_tenants is False
    assert settings.batch_rules().turns is None
    # Weights and a cap alone change nothing: they tune fair_tenants.
    tuned = load_settings(**GOOD, tenant_weights={"acme": 2}, tenant_max_rows=10)
    assert tuned.batch_rules().turns is None


def test_fair_settings_become_the_claim_s_turns() -> None:
    settings = load_settings(
        **GOOD, fair_tenants=True, tenant_weights="acme=3, globex=2", tenant_max_rows="50"
    )
    rules = settings.batch_rules()
    assert rules.turns == TenantTurns(weights={"acme": 3, "globex": 2}, max_rows=50)
    # A shard that gave a tenant its cap probably has more waiting: the next cycle starts
    # at once, as after a full batch.
    assert rules.shard_full_at == 50
    assert load_settings(**GOOD, fair_tenants=True).batch_rules().shard_full_at == 500
    big_cap = load_settings(**GOOD, fair_tenants=True, tenant_max_rows=5000)
    assert big_cap.batch_rules().shard_full_at == 500


def test_the_environment_takes_pairs_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in GOOD.items():
        monkeypatch.setenv(f"OUTBOX_{name.upper()}", value)
    monkeypatch.setenv("OUTBOX_FAIR_TENANTS", "true")
    monkeypatch.setenv("OUTBOX_TENANT_WEIGHTS", "acme=3,globex=1")
    assert load_settings().tenants.tenant_weights == {"acme": 3, "globex": 1}
    monkeypatch.setenv("OUTBOX_TENANT_WEIGHTS", '{"acme": 4}')
    assert load_settings().tenants.tenant_weights == {"acme": 4}
    monkeypatch.setenv("OUTBOX_TENANT_WEIGHTS", "")
    assert load_settings().tenants.tenant_weights == {}


def test_the_flags_take_pairs_or_json() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["run", "--fair-tenants", "--tenant-weights", "acme=2", "--tenant-max-rows", "20"]
    )
    overrides = _run_overrides(args)
    settings = load_settings(**GOOD, **overrides)
    assert settings.batch_rules().turns == TenantTurns(weights={"acme": 2}, max_rows=20)
    args = parser.parse_args(["run", "--tenant-weights", '{"acme": 5}'])
    assert load_settings(**GOOD, **_run_overrides(args)).tenants.tenant_weights == {"acme": 5}
    with pytest.raises(RelayConfigError, match="not valid JSON"):
        _run_overrides(parser.parse_args(["run", "--tenant-weights", "{acme"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"tenant_weights": "acme"}, "name=weight"),
        ({"tenant_weights": "=3"}, "name=weight"),
        ({"tenant_weights": "acme=0"}, "greater than or equal to 1"),
        ({"tenant_weights": "acme=-2"}, "greater than or equal to 1"),
        ({"tenant_weights": "acme=many"}, "valid integer"),
        ({"tenant_weights": "acme=1.5"}, "valid integer"),
        ({"tenant_weights": {"acme": 20_000}}, "less than or equal to 10000"),
        ({"tenant_weights": {"": 2}}, "at least 1 character"),
        ({"tenant_weights": {"t" * 256: 2}}, "at most 255 characters"),
        ({"tenant_weights": ["acme"]}, "valid dictionary"),
        ({"tenant_max_rows": 0}, "greater than or equal to 1"),
        ({"tenant_max_rows": "lots"}, "valid integer"),
        ({"gauges_tenant_top": -1}, "greater than or equal to 0"),
    ],
)
def test_bad_tenant_settings_are_refused_at_load(override: dict[str, Any], message: str) -> None:
    with pytest.raises(RelayConfigError) as info:
        load_settings(**GOOD, fair_tenants=True, **override)
    text = str(info.value)
    name = next(iter(override))
    assert f"OUTBOX_{name.upper()}" in text
    assert message in text
    assert "secret-pw" not in "".join(traceback.format_exception(info.value))


def _gauges(observer: RelayObserver) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for family in observer.metrics.registry.collect():
        if family.name.startswith("outbox_relay_tenant_"):
            for sample in family.samples:
                found[sample.name, sample.labels["tenant"]] = sample.value
    return found


def test_tenant_gauges_keep_a_bounded_label_set_and_drop_stale_labels() -> None:
    observer = RelayObserver()
    pending = "outbox_relay_tenant_pending_rows"
    age = "outbox_relay_tenant_oldest_pending_age_seconds"
    observer.tenant_backlog(
        [
            TenantBacklog("acme", False, 500, 30.0),
            TenantBacklog(None, False, 20, 2.0),
            TenantBacklog(None, True, 7, 12.0),
        ]
    )
    assert _gauges(observer) == {
        (pending, "acme"): 500,
        (pending, "none"): 20,
        (pending, "other"): 7,
        (age, "acme"): 30.0,
        (age, "none"): 2.0,
        (age, "other"): 12.0,
    }
    # acme drained and left the top: its series go; "other" stays, at 0 when empty.
    observer.tenant_backlog([TenantBacklog("globex", False, 3, 1.0)])
    assert _gauges(observer) == {
        (pending, "globex"): 3,
        (pending, "other"): 0,
        (age, "globex"): 1.0,
        (age, "other"): 0.0,
    }
    # A tenant that happens to be called "other" shares that label: summed, oldest kept.
    observer.tenant_backlog(
        [TenantBacklog("other", False, 4, 9.0), TenantBacklog(None, True, 6, 3.0)]
    )
    assert _gauges(observer) == {(pending, "other"): 10, (age, "other"): 9.0}
    observer.tenant_backlog([])
    assert b'tenant="other"' in generate_latest(observer.metrics.registry)
