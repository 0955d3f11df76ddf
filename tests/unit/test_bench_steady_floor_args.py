"""bench/steady_floor.py's loop and its place in bench/relay_fleet.py,
bench/large_events.py (beside Postgres alone) and bench/relay_transactions.py (the relay
and the loop, each plain and transactional, and the ratio lines that run ends with): the
arguments each takes, and the hostile ones refused before anything starts."""

from __future__ import annotations

from types import ModuleType

import pytest

from bench import large_events, relay_fleet, relay_transactions, steady_floor
from bench.compare.latency import LatencyPoint
from relay.config import field_help


@pytest.fixture(autouse=True)
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services a bench's parser requires, named (nothing connects to them here)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")


def test_the_floor_sleeps_a_hundredth_and_takes_up_to_500_rows_by_default() -> None:
    args = steady_floor.parse_args([])
    assert (args.gather_s, args.limit) == (0.01, 500)
    args = steady_floor.parse_args(["--gather-s", "0", "--limit", "16"])
    assert (args.gather_s, args.limit) == (0.0, 16)


@pytest.mark.parametrize(
    ("bench", "hostile"),
    [
        (steady_floor, ["--gather-s", "-0.001"]),
        (steady_floor, ["--limit", "0"]),
        (steady_floor, ["--limit", "-5"]),
        (steady_floor, ["--gather-s", "soon"]),
        # The transactional loop is the relay's client's: confluent-kafka's is not written.
        (steady_floor, ["--transactions", "--client", "librdkafka"]),
        (relay_fleet, ["--floor-kinds", ""]),
        (relay_fleet, ["--floor-kinds", "take,delete"]),
        (relay_fleet, ["--floor-kinds", "Settle"]),
        (relay_transactions, ["--latency-variants", ""]),
        (relay_transactions, ["--latency-variants", "floor,debezium"]),
        (relay_transactions, ["--latency-variants", "Floor"]),
        (relay_transactions, ["--latency-variants", "floor;plain"]),
        (relay_transactions, ["--latency-variants", "floor,floor"]),
        (relay_transactions, ["--floor-gather-s", "-0.01"]),
        (relay_transactions, ["--floor-gather-s", "5"]),
        (relay_transactions, ["--floor-gather-s", "soon"]),
        (relay_transactions, ["--latency-bar", "0"]),
        (relay_transactions, ["--latency-bar", "nan"]),
    ],
)
def test_the_floor_refuses_what_it_cannot_run_and_so_does_the_transactions_bench(
    bench: ModuleType, hostile: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(hostile)
    assert exit_.value.code == 2
    assert hostile[0] in capsys.readouterr().err


def test_the_fleet_bench_runs_no_floor_unless_asked() -> None:
    assert relay_fleet.parse_args([]).floor_gathers == []
    assert relay_fleet.parse_args([]).floor_kinds == ["take"]
    assert relay_fleet.parse_args(["--floor-kinds", "take,settle"]).floor_kinds == [
        "take",
        "settle",
    ]
    assert steady_floor.parse_args(["--settle"]).settle
    assert relay_fleet.parse_args(["--floor-gathers", "0.01,0.02"]).floor_gathers == [0.01, 0.02]


@pytest.mark.parametrize(
    ("flag", "hostile"),
    [
        *(("--floor-gathers", h) for h in ["-0.01", "0.01,-1", "fast", "0.01;0.02"]),
        # The relay's paces: what OUTBOX_PROBE_GATHER_S takes (0 to 1 s).
        *(("--gathers", h) for h in ["-0.01", "0.01,1.5", "nan", "slow", "0.01;0.02"]),
    ],
)
def test_the_fleet_bench_refuses_a_sleep_or_pace_it_cannot_run(
    flag: str, hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        relay_fleet.parse_args([flag, hostile])
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err


def test_the_fleet_bench_runs_the_relay_at_its_own_pace_unless_given_paces() -> None:
    assert relay_fleet.parse_args([]).gathers == []
    assert relay_fleet.parse_args(["--gathers", "0,0.015"]).gathers == [0.0, 0.015]


def fleet_run(label: str, cpu: float, p99_ms: float) -> relay_fleet.FleetRun:
    return relay_fleet.FleetRun(label, 30.0, 0.02, 1600.0, cpu, p99_ms / 2, p99_ms, 0, 1.0)


def test_each_relay_run_is_set_against_the_floor_of_the_nearest_p99_at_or_above_its_own() -> None:
    relays = [
        fleet_run("1 gather 0.01 s", 0.166, 11.8),
        fleet_run("1 gather 0.02 s", 0.128, 22.0),
        fleet_run("1 gather 0.03 s", 0.110, 30.0),  # above the bar: no pairing
    ]
    floors = [
        fleet_run("floor 0.01 s", 0.087, 15.0),
        fleet_run("floor 0.013 s", 0.069, 19.8),
        fleet_run("floor 0.02 s", 0.050, 26.0),  # above the bar: never a partner
    ]
    lines = relay_fleet.at_equal_latency(relays, floors).splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[3:]}
    assert "| floor 0.01 s | 15.0 | 8.7% | 1.91 |" in rows["1 gather 0.01 s"]
    assert "none" in rows["1 gather 0.02 s"]  # no floor between 22.0 and 25 ms
    assert "none" in rows["1 gather 0.03 s"]
    assert len(rows) == 3


def test_the_large_events_bench_adds_the_floor_and_postgres_alone_only_when_asked() -> None:
    assert large_events.contenders(large_events.parse_args([])) == ["keep"]
    both = large_events.parse_args(["--retentions", "delete", "--floor", "--postgres-alone"])
    assert large_events.contenders(both) == ["delete", "floor", "postgres"]


@pytest.mark.parametrize(
    ("budget", "size", "rows"), [(None, 900_000, 18), (None, 20 * 2**20, 1), (2**20, 1000, 1048)]
)
def test_the_floor_and_postgres_alone_take_what_the_relay_s_byte_budget_claims(
    budget: int | None, size: int, rows: int
) -> None:
    argv = [] if budget is None else ["--claim-max-bytes", str(budget)]
    assert large_events.rows_claimed(large_events.parse_args(argv), size) == rows


def test_the_floor_runs_on_the_relay_s_client_unless_told() -> None:
    assert steady_floor.parse_args([]).client == "aiokafka"
    assert relay_fleet.parse_args([]).floor_clients == ["aiokafka"]
    both = relay_fleet.parse_args(["--floor-clients", "aiokafka,librdkafka"])
    assert both.floor_clients == ["aiokafka", "librdkafka"]


@pytest.mark.parametrize("hostile", ["", ",", "kafka-python", "aiokafka,librdkafka,java"])
def test_a_client_the_floor_does_not_have_is_refused(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        relay_fleet.parse_args(["--floor-clients", hostile])
    assert exit_.value.code == 2
    assert "--floor-clients" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        steady_floor.parse_args(["--client", hostile])


def test_the_floor_is_transactional_only_when_asked() -> None:
    assert steady_floor.parse_args([]).transactions is False
    assert steady_floor.parse_args(["--transactions"]).transactions is True


async def test_the_transactional_floor_sends_transactional_batches_and_retries_quickly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiokafka.producer import sender
    from aiokafka.record.default_records import DefaultRecordBatch

    # aiokafka's own value: another test in this process (the relay's transactions) may
    # have set the relay's already.
    monkeypatch.setattr(sender, "BACKOFF_OVERRIDE", 0.02)
    plain = steady_floor.AiokafkaSender("127.0.0.1:1", 1 << 20)
    assert sender.BACKOFF_OVERRIDE == 0.02  # untouched, until a transactional floor
    transactional = steady_floor.AiokafkaSender("127.0.0.1:1", 1 << 20, "floor-t")
    assert sender.BACKOFF_OVERRIDE == 0.002  # the relay's (relay/transport/aiokafka_adapter.py)
    for floor, flag in ((plain, False), (transactional, True)):
        batch = floor.producer.create_batch()
        batch.append(timestamp=None, key=b"k", value=b"v")
        assert DefaultRecordBatch(bytes(batch._build())).is_transactional is flag


def test_the_transactional_floor_takes_the_relay_s_prefix_or_an_id_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OUTBOX_KAFKA_TRANSACTIONAL_ID_PREFIX", "bench-r1")
    assert steady_floor.transactional_id() == "bench-r1-floor"
    monkeypatch.delenv("OUTBOX_KAFKA_TRANSACTIONAL_ID_PREFIX")
    first, second = steady_floor.transactional_id(), steady_floor.transactional_id()
    assert first.startswith("steady-floor-")
    assert first != second


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
