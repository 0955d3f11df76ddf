"""bench/large_events.py's retention modes: every round runs each one named, against that
round's broker run, and a mode the relay does not have is refused before anything starts;
each window starts on warm memory unless --no-warm; a wait for a drain ends when the
draining process exits or its time is up."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from bench.large_events import parse_args
from bench.shared.processes import Proc, poll_until
from bench.shared.warm_memory import warm


@pytest.fixture(autouse=True)
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services a bench's parser requires, named (nothing connects to them here)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")


def test_the_relay_s_default_mode_alone_unless_asked() -> None:
    assert parse_args([]).retentions == ["keep"]
    assert parse_args(["--retentions", "keep,delete"]).retentions == ["keep", "delete"]


@pytest.mark.parametrize("hostile", ["", ",", "keep,forever", "KEEP", "keep;delete"])
def test_a_mode_the_relay_does_not_have_is_refused(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--retentions", hostile])
    assert exit_.value.code == 2
    assert "--retentions" in capsys.readouterr().err


def test_windows_start_on_warm_memory_unless_told_not_to() -> None:
    assert parse_args([]).warm is True
    assert parse_args(["--no-warm"]).warm is False


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


HUGE_PAGE = 2 * 1024 * 1024  # with transparent huge pages, one fault may map this much


@pytest.mark.parametrize("nbytes", [1, 4095, 4097, 3 * 1024 * 1024 + 5, 64 * 1024 * 1024])
def test_warming_takes_any_positive_size_and_touches_all_of_it(nbytes: int) -> None:
    """Warm memory is memory the kernel has handed out once: each page of the region is
    first touched (a minor fault each, or one per huge page), not merely mapped."""
    before = minor_faults()
    took = warm(nbytes)
    faults = minor_faults() - before
    assert took >= 0.0
    assert faults >= -(-nbytes // HUGE_PAGE), faults


@pytest.mark.parametrize("hostile", [0, -1, -(2**40)])
def test_warming_refuses_a_size_that_is_not_positive(hostile: int) -> None:
    with pytest.raises(ValueError, match="positive byte count"):
        warm(hostile)


def test_a_wait_ends_when_the_draining_process_exits_or_its_time_is_up() -> None:
    async def never() -> bool:
        return False

    gone = Proc("floor-gone", subprocess.Popen([sys.executable, "-c", "pass"]), Path("/dev/null"))
    gone.popen.wait()
    with pytest.raises(RuntimeError, match="floor-gone exited"):
        asyncio.run(poll_until(never, gone, 30, "not drained"))
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(RuntimeError, match="not drained in 0 s"):
            asyncio.run(
                poll_until(never, Proc("relay-slow", slow, Path("/dev/null")), 0.1, "not drained")
            )
    finally:
        slow.kill()
        slow.wait()
