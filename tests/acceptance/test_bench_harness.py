"""The relay benchmark's harness still works: its CI mode, ours against the naive relay.

`bench/relay_compare.py --ci` copies a 10,000-event backlog written by producer_lib into
two private databases on the test Postgres, drains one with `python -m relay.cli run`
(defaults) and one with the hand-written naive relay into private topics, and exits 1
when ours is not faster. A check that the harness measures something sensible, not a
timing assertion: the naive relay sends one event per transaction and is slower by
more than an order of magnitude on any machine.
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
def test_ours_drains_faster_than_the_naive_relay(postgres_admin: str, kafka_bootstrap: str) -> None:
    env = {"DATABASE_URL": postgres_admin, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    # A session of its own: on a timeout the relays the harness launched are killed with
    # it, instead of running on, orphaned, against a database nobody drops.
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "relay_compare.py"), "--ci"],
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
    assert ours > naive > 0, output
    assert "| ours (defaults) |" in output
    assert "| naive relay |" in output


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
