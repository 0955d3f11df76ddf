"""bench/relay_transactions.py's commit-to-visible part: the variants it measures (the
relay and bench/steady_floor.py's loop, each plain and transactional), the floor's pacing,
the hostile flags refused before anything starts, and the ratio lines it ends with."""

from __future__ import annotations

import pytest

from bench import relay_transactions
from bench.compare.latency import LatencyPoint
from relay.config import field_help


@pytest.fixture(autouse=True)
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services a bench's parser requires, named (nothing connects to them here)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")


def test_the_relay_and_the_floor_are_measured_each_plain_and_transactional() -> None:
    args = relay_transactions.parse_args([])
    assert args.latency_variants == ["plain", "transactions", "floor", "floor-transactions"]
    assert args.latency_bar == 2.0
    args = relay_transactions.parse_args(
        ["--latency-variants", "floor-transactions,floor", "--floor-gather-s", "0"]
    )
    assert args.latency_variants == ["floor-transactions", "floor"]
    assert args.floor_gather_s == 0.0


def test_the_floor_paces_its_cycles_by_the_relay_s_gather_unless_told() -> None:
    (relay_gather,) = [d for _, env, _, d in field_help() if env == "OUTBOX_PROBE_GATHER_S"]
    assert relay_transactions.parse_args([]).floor_gather_s == float(relay_gather)


@pytest.mark.parametrize(
    "hostile",
    [
        ["--latency-variants", ""],
        ["--latency-variants", "floor,debezium"],
        ["--latency-variants", "Floor"],
        ["--latency-variants", "floor;plain"],
        ["--latency-variants", "floor,floor"],
        ["--floor-gather-s", "-0.01"],
        ["--floor-gather-s", "5"],
        ["--floor-gather-s", "soon"],
        ["--latency-bar", "0"],
        ["--latency-bar", "nan"],
    ],
)
def test_a_variant_or_a_floor_pacing_it_cannot_run_is_refused(
    hostile: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        relay_transactions.parse_args(hostile)
    assert exit_.value.code == 2
    assert hostile[0] in capsys.readouterr().err


def point(variant: str, offered: float, p99_ms: float) -> LatencyPoint:
    return LatencyPoint(variant, offered, offered, 1000, 0, p99_ms / 2, p99_ms, p99_ms)


def test_the_ratio_lines_put_each_transactional_p99_over_its_plain_twin_s() -> None:
    latency = {
        "plain": [point("plain", 500, 10.0), point("plain", 2000, 20.0)],
        "transactions": [point("transactions", 500, 50.0), point("transactions", 2000, 40.0)],
        "floor": [point("floor", 500, 10.0), point("floor", 2000, 30.0)],
        "floor-transactions": [point("floor-transactions", 500, 15.0), point("ft", 2000, 90.0)],
    }
    assert relay_transactions.latency_ratios(latency, 2.0) == [
        "p99 transactions / plain, relay @ 500/s: 50.0 / 10.0 ms = 5.00 (misses the 2x bar)",
        "p99 transactions / plain, relay @ 2,000/s: 40.0 / 20.0 ms = 2.00 (meets the 2x bar)",
        "p99 transactions / plain, floor @ 500/s: 15.0 / 10.0 ms = 1.50 (meets the 2x bar)",
        "p99 transactions / plain, floor @ 2,000/s: 90.0 / 30.0 ms = 3.00 (misses the 2x bar)",
    ]
    del latency["floor"]  # a pair not measured whole has no ratio
    assert len(relay_transactions.latency_ratios(latency, 2.0)) == 2
