"""The issue benches still run, at a size that proves it and nothing about speed.

bench/relay_hot_path.py fakes the relay's store with a class of its own, and a change
of the Store protocol (the claim's tenant turns) once broke it unnoticed;
bench/tenant_fairness.py launches relays and writers in every configuration;
bench/pg_fetch_waits.py counts the event loop's waits by patching it; bench/outbox_bloat.py
holds a snapshot open beside a relay; bench/large_events.py samples a relay's memory;
bench/relay_failover.py SIGKILLs the active replica of a fleet under load;
bench/relay_fleet.py runs bench/steady_floor.py's loop beside a relay. Each runs here
against the test services, its output checked for the rows it exists to print.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_bench(args: list[str], env: dict[str, str], timeout_s: float) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    # A session of its own: on a timeout, the relays the bench launched die with it.
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**base, **env},
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{args[0]} did not finish in {timeout_s:.0f} s:\n{output}")
    assert proc.returncode == 0, output
    return output


def table_cells(row: str) -> list[str]:
    """The cells of a markdown table row, stripped, thousands separators dropped."""
    return [c.strip().replace(",", "") for c in row.strip("|").split("|")]


def first_round(output: str) -> list[float]:
    """The numbers of the `| 1 | ... |` row a round-by-round bench prints."""
    (row,) = [line for line in output.splitlines() if line.startswith("| 1 |")]
    return [float(cell) for cell in row.strip("|").split("|")[1:]]


@pytest.mark.timeout(120)
def test_the_hot_path_bench_runs(kafka_bootstrap: str) -> None:
    output = run_bench(
        ["bench/relay_hot_path.py", "--rows", "400", "--cycles", "2", "--rounds", "1"],
        {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        100,
    )
    relay_path, alone = first_round(output)[:2]
    assert relay_path > 0, output
    assert alone > 0, output


@pytest.mark.timeout(300)
def test_the_fairness_bench_runs_with_the_tenants_apart(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            "bench/tenant_fairness.py",
            "--events",
            "30000",
            "--rate",
            "50",
            "--idle-s",
            "3",
            "--configs",
            "idle,apart,fair",
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        280,
    )
    rows = {line.split("|")[1].strip(): line for line in output.splitlines() if line[:2] == "| "}
    for config in ("idle", "apart", "fair"):
        assert config in rows, output
    # apart: A's whole backlog on its topic, B's events there too, none missing.
    cells = [c.strip() for c in rows["apart"].strip("|").split("|")]
    assert cells[2] == "30,000", output
    assert int(cells[5]) > 0, output
    assert cells[9] == "0", output
    assert "B p99 apart / B p99 idle" in output


@pytest.mark.timeout(60)
def test_the_fetch_waits_bench_runs(pg_url: str) -> None:
    output = run_bench(
        [
            "bench/pg_fetch_waits.py",
            *("--rows", "2000", "--queries", "2", "--rounds", "1"),
            # A fetch in a thread beside the busy loop can starve for seconds a query (the
            # bench's docstring says why); the budget bounds it.
            *("--busy-queries", "1", "--busy-budget-s", "5", "--arrays"),
        ],
        {"DATABASE_URL": pg_url},
        50,
    )
    waits_table, shapes_table = output.split("\n\n")
    shapes = {line.split("|")[2].strip(): line for line in shapes_table.splitlines()[2:]}
    assert set(shapes) == {"rows", "arrays"}, output
    cells = first_round(waits_table)
    assert cells[1] >= 1, output  # a 2,000-row result is more than one read
    assert cells[0] > 0, output
    assert cells[2] > 0, output
    assert cells[4] > 0, output
    assert cells[5] > 0, output
    # One row of arrays arrives in a few large reads: fewer waits than 2,000 rows.
    waits = {shape: float(line.strip("|").split("|")[-1]) for shape, line in shapes.items()}
    assert waits["arrays"] < waits["rows"], output


@pytest.mark.timeout(150)
def test_the_bloat_bench_runs(postgres_admin: str, kafka_bootstrap: str) -> None:
    output = run_bench(
        ["bench/outbox_bloat.py", "--events", "3000", "--rounds", "2"],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        140,
    )
    rows = {line.split("|")[1].strip(): line for line in output.splitlines() if line[:2] == "| "}
    for mode in ("clean", "held"):
        cells = table_cells(rows[mode])
        rates, buffers = cells[1:3], cells[4:6]
        assert all(float(r) > 0 for r in rates), output
        assert all(int(b) > 0 for b in buffers), output
    assert "held / clean per round:" in output


@pytest.mark.timeout(150)
def test_the_missing_topic_bench_runs(postgres_admin: str, kafka_bootstrap: str) -> None:
    output = run_bench(
        [
            "bench/missing_topic.py",
            "--database-url",
            postgres_admin,
            "--bootstrap",
            kafka_bootstrap,
            "--events",
            "2000",
            "--rounds",
            "1",
        ],
        {},
        140,
    )
    (row,) = [line for line in output.splitlines() if line.startswith("| 1 ")]
    clean, missing, ratio = (float(c.replace(",", "")) for c in row.strip("|").split("|")[1:4])
    assert clean > 0, output
    assert missing > 0, output
    assert ratio > 0, output
    assert "median ratio (missing / clean):" in output


@pytest.mark.timeout(240)
def test_the_large_events_bench_runs(postgres_admin: str, kafka_bootstrap: str) -> None:
    output = run_bench(
        [
            "bench/large_events.py",
            *("--events", "24", "--keys", "6", "--sizes", "200000", "--rounds", "1"),
            *("--floor", "--postgres-alone"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        220,
    )
    row, floor, alone = [line for line in output.splitlines() if line.startswith("| 200,000 ")]
    cells = table_cells(row)
    assert cells[1] == "keep", output  # the relay's default
    # The floor's drain ends once every record is on the topic (the bench counts them).
    floor_cells = table_cells(floor)
    assert floor_cells[1] == "floor", output
    assert float(floor_cells[4]) > 0, output
    # Postgres alone: no relay process, so no RSS; the client's CPU in the relay's column.
    alone_cells = table_cells(alone)
    assert alone_cells[1] == "postgres", output
    assert float(alone_cells[4]) > 0, output
    assert alone_cells[7:9] == ["-", "-"], output
    broker, relay, ratio, before, peak = (float(cells[i]) for i in (2, 4, 6, 7, 8))
    # CPU seconds in the drain: the relay's always, Postgres's and Kafka's when the
    # services' pid files are found.
    relay_cpu, *servers = (c.strip() for c in cells[10].split("/"))
    assert all(c == "" or float(c) >= 0 for c in servers), output
    assert broker > 0, output
    # The figures agree with each other: MB/s is events/s times the payload, the ratio is
    # the two rates', and the relay's CPU fits in its drain's wall time on every core (a
    # figure in clock ticks, or counted from the process's start, would not).
    relay_mb_s, broker_mb_s = (float(cells[i].replace(",", "")) for i in (5, 3))
    assert relay_mb_s == pytest.approx(relay * 200_000 / 1e6, abs=0.51), output
    assert broker_mb_s == pytest.approx(broker * 200_000 / 1e6, abs=0.51), output
    rounding = relay / broker * (0.5 / relay + 0.5 / broker) + 0.005  # rates print as ints
    assert ratio == pytest.approx(relay / broker, abs=rounding), output
    drain_s = 24 / relay
    assert 0 < float(relay_cpu) <= drain_s * (os.cpu_count() or 1) + 0.05, output
    assert relay > 0, output
    assert ratio > 0, output
    assert peak >= before > 0, output


@pytest.mark.timeout(150)
def test_the_horizon_explain_bench_runs_and_floors_skip_dead_entries(postgres_admin: str) -> None:
    output = run_bench(
        ["bench/horizon_explain.py", "--levels", "0,4000"],
        {"DATABASE_URL": postgres_admin},
        140,
    )
    cells = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line.strip("|").split("|")[2]
        for line in output.splitlines()
        if line[:2] == "| " and "dead rows" not in line
    }
    buffers = {k: int(v.strip().replace(",", "")) for k, v in cells.items()}
    # 16,000 rows published under the held snapshot (two backlogs of 8,000): the floored
    # probe steps over none of their entries.
    assert (
        buffers["16,000", "empty claim floored"] * 10 < buffers["16,000", "empty claim unfloored"]
    )


@pytest.mark.timeout(180)
def test_the_failover_bench_runs_and_loses_nothing(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            "bench/relay_failover.py",
            *("--replicas", "2", "--rate", "200", "--seconds", "10", "--kill-at", "3"),
            *("--lease-ttl-s", "2", "--writers", "2", "--keys", "50", "--partitions", "2"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        170,
    )
    assert "SIGKILLed relay-" in output, output
    assert "after the kill, p99 per window" in output, output
    assert output.rstrip().endswith("missing 0"), output


@pytest.mark.timeout(200)
def test_the_fleet_bench_runs_the_floor_loop_beside_a_relay_and_both_deliver(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            "bench/relay_fleet.py",
            *("--fleets", "1", "--floor-gathers", "0.01", "--idle-s", "1", "--seconds", "3"),
            *("--rate", "200", "--writers", "2", "--keys", "50", "--partitions", "2"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        190,
    )
    rows = {
        cells[0]: cells
        for line in output.splitlines()
        if line.startswith("| ") and not line.startswith("| relays")
        for cells in [table_cells(line)]
        if cells[0] and not cells[0].startswith("-")
    }
    assert set(rows) == {"1", "floor 0.01 s"}, output
    for cells in rows.values():
        steady_cpu, missing = float(cells[5].rstrip("%")), int(cells[9])
        # Percent of one core, all relays together: at most every core of the machine.
        assert 0 < steady_cpu <= 100 * (os.cpu_count() or 1), output
        assert missing == 0, output
