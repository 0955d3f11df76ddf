"""The benches still run through their entry point (`python -m bench NAME`), at a size
that proves it and nothing about speed.

tenant_fairness launches relays and writers in every configuration; large_events samples
a relay's memory; relay_fleet runs steady_floor's loop beside a relay; relay_transactions
measures steady_floor's loop plain and transactional, read read_committed; relay_latency
measures an idle relay and a steady load; record_formats runs Debezium beside the relay's
debezium format and drains once per format; relay_compare drains and loads the relay on
MariaDB beside Postgres, and the floor loop on both. Each runs here against the test
services, its output checked for the rows it exists to print.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.mariadb import mariadb_admin_url

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
        pytest.fail(f"{args[:3]} did not finish in {timeout_s:.0f} s:\n{output}")
    assert proc.returncode == 0, output
    return output


def table_cells(row: str) -> list[str]:
    """The cells of a markdown table row, stripped, thousands separators dropped."""
    return [c.strip().replace(",", "") for c in row.strip("|").split("|")]


@pytest.mark.timeout(300)
def test_the_fairness_bench_runs_with_the_tenants_apart(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            "-m",
            "bench",
            "tenant_fairness",
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


@pytest.mark.timeout(240)
def test_the_large_events_bench_runs(postgres_admin: str, kafka_bootstrap: str) -> None:
    output = run_bench(
        [
            "-m",
            "bench",
            "large_events",
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


@pytest.mark.timeout(200)
def test_the_fleet_bench_runs_the_floor_loop_beside_a_relay_and_both_deliver(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            "-m",
            "bench",
            "relay_fleet",
            *("--fleets", "1", "--floor-gathers", "0.01", "--idle-s", "1", "--seconds", "3"),
            *("--floor-kinds", "take,settle"),
            *("--rate", "200", "--writers", "2", "--keys", "50", "--partitions", "2"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        190,
    )
    tables: list[list[list[str]]] = []
    for line in output.splitlines():
        if not line.startswith("|"):
            continue
        cells = table_cells(line)
        if cells[0] == "relays":  # a table's header
            tables.append([])
        elif cells[0] and not cells[0].startswith("-"):
            tables[-1].append(cells)
    runs, paired = ({cells[0]: cells for cells in table} for table in tables)
    assert set(runs) == {"1", "floor 0.01 s", "floor 0.01 s settle"}, output
    for cells in runs.values():
        steady_cpu, missing = float(cells[5].rstrip("%")), int(cells[9])
        # Percent of one core, all relays together: at most every core of the machine.
        assert 0 < steady_cpu <= 100 * (os.cpu_count() or 1), output
        assert missing == 0, output
    # The relay against the floor of the nearest p99 at or above its own, if any.
    assert set(paired) == {"1"}, output
    relay_p99, floor = float(paired["1"][1]), paired["1"][3]
    assert relay_p99 == float(runs["1"][8]), output
    if floor != "none":
        assert float(runs[floor][8]) >= relay_p99, output
        cpu = float(runs["1"][5].rstrip("%")) / float(runs[floor][5].rstrip("%"))
        assert float(paired["1"][6]) == pytest.approx(cpu, rel=0.1), output


@pytest.mark.timeout(200)
def test_the_transactions_bench_measures_the_floor_loop_plain_and_transactional(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    """The floor's transactional loop commits what it sends: a read_committed consumer
    receives every event (a transaction never committed would leave them missing)."""
    output = run_bench(
        [
            *("-m", "bench", "relay_transactions", "--events", "1000", "--rounds", "1"),
            *("--partitions", "2", "--bar", "0", "--latency-variants", "floor,floor-transactions"),
            *("--latency-rates", "200", "--latency-seconds", "2", "--latency-warmup-s", "1"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        190,
    )
    rows = {
        cells[0]: cells
        for line in output.splitlines()
        if line.startswith(("| floor ", "| floor-transactions "))
        for cells in [table_cells(line)]
    }
    assert set(rows) == {"floor", "floor-transactions"}, output
    for cells in rows.values():
        assert int(cells[2]) > 0, output  # committed/s
        assert float(cells[4]) > 0, output  # p99 ms
        assert cells[6] == "0", output  # missing
    assert "p99 transactions / plain, floor @ 200/s: " in output, output


@pytest.mark.timeout(200)
def test_the_latency_bench_measures_an_idle_relay_and_a_load(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    output = run_bench(
        [
            *("-m", "bench", "relay_latency", "--rates", "200", "--seconds", "2"),
            *("--idle-s", "1", "--ceiling-events", "0", "--writers", "2", "--keys", "50"),
            *("--partitions", "2"),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        190,
    )
    assert "idle relay: " in output, output
    (row,) = [line for line in output.splitlines() if line.startswith("| 200 ")]
    cells = table_cells(row)
    assert float(cells[2]) > 0, output  # p50 ms
    assert int(cells[5]) > 0, output  # measured
    assert cells[6] == "0", output  # missing


@pytest.mark.timeout(420)
def test_the_record_formats_bench_finds_the_relay_s_debezium_records_equal_to_debezium_s(
    postgres_admin: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The comparison runs Debezium's own connector and EventRouter (Kafka Connect, fetched
    once into the bench cache) on a wal_level=logical Postgres the bench starts for it, and
    the relay in its debezium format on the same rows: zero differences is the claim that
    the relay's records are Debezium's. The drains run at a size that proves they run."""
    output = run_bench(
        [
            *("-m", "bench", "record_formats", "--compare-events", "200"),
            *("--events", "2000", "--rounds", "1", "--partitions", "2"),
            *("--logdir", str(tmp_path)),
        ],
        {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        400,
    )
    rows = {
        cells[0]: cells[1]
        for line in output.splitlines()
        if line.startswith("| ")
        for cells in [table_cells(line)]
    }
    assert rows["events emitted"] == "200", output
    assert rows["compared (matched by id)"] == "200", output
    assert rows["equal"] == "200", output
    assert rows["differing"] == "0", output
    assert rows["only on Debezium's topics"] == rows["only on the relay's topics"] == "0", output
    # What was compared: Debezium's id and placement headers, beside key, value and topic.
    assert "Headers Debezium set, compared: eventType, id;" in output, output
    drains = [
        table_cells(line)
        for line in output.splitlines()
        if line.startswith(("| native ", "| cloudevents-", "| debezium "))
    ]
    assert [cells[0] for cells in drains] == [
        "native",
        "cloudevents-binary",
        "cloudevents-structured",
        "debezium",
    ], output
    for cells in drains:
        assert cells[6:9] == ["0", "0", "0"], output  # lost, duplicates, order violations


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("pair", "mariadb_label"),
    [
        (("ours", "ours-mariadb"), "| ours on MariaDB "),
        (("floor", "floor-mariadb"), "| floor loop on MariaDB "),
    ],
)
def test_the_compare_bench_runs_the_relay_and_its_floor_on_mariadb_beside_postgres(
    postgres_admin: str, kafka_bootstrap: str, pair: tuple[str, str], mariadb_label: str
) -> None:
    """The same backlog drained and the same load offered on each database, in one run, by
    the relay or by the floor loop: both drains whole and in order, both loads delivered,
    the ratios printed."""
    output = run_bench(
        [
            *("-m", "bench", "relay_compare", "--services", "env"),
            *("--contenders", ",".join(pair), "--events", "3000", "--partitions", "2"),
            *("--latency-rates", "200", "--latency-seconds", "3", "--latency-warmup-s", "1"),
        ],
        {
            "DATABASE_URL": postgres_admin,
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "MARIADB_URL": mariadb_admin_url(),
        },
        290,
    )
    for name in pair:
        assert (
            f"audit {name}: 3,000 records, 3,000 distinct events, 0 lost, 0 duplicates, "
            "0 order violations, 0 unpublished, 0 unreadable"
        ) in output, output
    assert f"{pair[0]}: MariaDB/Postgres drain: " in output, output
    assert f"{pair[0]}: MariaDB/Postgres commit-to-Kafka p99 at 200 events/s: " in output, output
    (row,) = [line for line in output.splitlines() if line.startswith(mariadb_label)][1:]
    cells = table_cells(row)  # the latency table's row (the drain table's comes first)
    assert int(cells[3]) > 0, output  # events measured
    assert float(cells[8]) > 0, output  # p99 ms to Kafka
    assert cells[9] == "0", output  # not received
