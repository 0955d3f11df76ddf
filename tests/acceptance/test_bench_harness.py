"""The relay benchmark's harness still works: its CI mode, ours against the naive relay.

`python -m bench relay_compare --ci` copies a 10,000-event backlog written by producer_lib into
two private databases on the test Postgres, drains one with `python -m relay.cli run`
(defaults) and one with the hand-written naive relay into private topics, reads both
topics whole, and exits 1 when a drain lost, reordered or failed to finish events. Which
is faster is the bench's finding (docs/benchmarks.md), not something a shared CI machine
asserts: this checks that both drains were measured, whole.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(240)
def test_the_ci_mode_drains_ours_and_the_naive_relay_whole(
    postgres_admin: str, kafka_bootstrap: str
) -> None:
    env = {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    # A session of its own: on a timeout the relays the harness launched are killed with
    # it, instead of running on, orphaned, against a database nobody drops.
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "relay_compare", "--ci"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**_base_env(), **env},
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=220)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"relay_compare.py --ci did not finish in 220 s:\n{stdout}{stderr}")
    output = stdout + stderr
    assert proc.returncode == 0, output
    found = re.search(r"ours/naive: ([0-9.]+) \(ours ([0-9,]+) events/s, naive ([0-9,]+)", output)
    assert found, output
    ours, naive = (int(found.group(i).replace(",", "")) for i in (2, 3))
    assert ours > 0, output
    assert naive > 0, output
    # Both topics read back whole: ours delivered every event once, in order; the naive
    # relay, stopped at its time cap, what it delivered in order, the rest still pending.
    assert (
        "audit ours: 10,000 records, 10,000 distinct events, 0 lost, 0 duplicates, "
        "0 order violations, 0 unpublished, 0 unreadable"
    ) in output, output
    naive_audit = re.search(
        r"audit naive: ([0-9,]+) records, ([0-9,]+) distinct events, 0 lost, 0 duplicates, "
        r"0 order violations, ([0-9,]+) unpublished, 0 unreadable",
        output,
    )
    assert naive_audit, output
    records, distinct, unpublished = (int(g.replace(",", "")) for g in naive_audit.groups())
    assert records == distinct > 0, output
    assert distinct + unpublished == 10_000, output
    assert "| ours (defaults) |" in output
    assert "| naive relay |" in output


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
