"""claim_max_bytes: refused at config load unless a positive whole number of bytes, and
split evenly between the lanes and the shards they claim for."""

from __future__ import annotations

import pytest

from relay.config import load_settings
from relay.errors import RelayConfigError

BASE = {"database_url": "sqlite:///relay.db", "transport": "redis"}


@pytest.mark.parametrize("value", [0, -1, "lots", "1.5", "", "16MB", 2.5])
def test_a_budget_that_is_not_a_positive_byte_count_is_refused(value: object) -> None:
    with pytest.raises(RelayConfigError, match="claim_max_bytes"):
        load_settings(**BASE, claim_max_bytes=value)


def test_a_budget_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_CLAIM_MAX_BYTES", "-5")
    with pytest.raises(RelayConfigError, match=r"OUTBOX_CLAIM_MAX_BYTES|claim_max_bytes"):
        load_settings(**BASE)
    monkeypatch.setenv("OUTBOX_CLAIM_MAX_BYTES", "1048576")
    assert load_settings(**BASE).batch.claim_max_bytes == 1_048_576


def test_each_shard_gets_an_even_share_of_the_budget() -> None:
    rules = load_settings(**BASE, claim_max_bytes=16_000_000).batch_rules()
    assert rules.shard_bytes(16) == 1_000_000
    assert rules.shard_bytes(1) == 16_000_000
    # Two lanes (fair turns with a bulk lane) split it again.
    lanes = load_settings(
        **BASE, claim_max_bytes=16_000_000, fair_tenants=True, tenant_bulk_rows=100
    ).batch_rules()
    assert lanes.lanes == 2
    assert lanes.shard_bytes(16) == 500_000
    # Never nothing: a share of 0 would claim only the first shard's first row.
    assert load_settings(**BASE, claim_max_bytes=1).batch_rules().shard_bytes(16) == 1
