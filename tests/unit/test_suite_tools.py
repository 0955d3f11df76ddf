"""The test suite's own tools: the timings scripts/test prints, and the loopback ports
tests and benches give the servers they start."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scripts.ports import refusing_address, reserved_port, reserved_ports, taken_port
from tests.support import timings


def report(nodeid: str, when: str, duration: float) -> Any:
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, outcome="passed")


def test_timings_add_up_each_tests_phases_and_sum_each_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "timings.tsv"
    monkeypatch.setenv(timings.ENV, str(path))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    for phase, seconds in (("setup", 0.5), ("call", 2.0), ("teardown", 0.25)):
        timings.record(report("tests/integration/test_a.py::test_x[postgres]", phase, seconds))
    timings.record(report("tests/unit/test_b.py::test_y", "call", 0.125))
    timings.record(report("tests/acceptance/test_c.py::test_z@secure_kafka", "call", 9.0))
    timings.record(report("examples/x/tests/test_d.py::test_w", "call", 1.0))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")  # a worker: its controller reports
    timings.record(report("tests/unit/test_b.py::test_y", "call", 100.0))

    assert timings.read(path) == {
        "tests/integration/test_a.py::test_x[postgres]": 2.75,
        "tests/unit/test_b.py::test_y": 0.125,
        "tests/acceptance/test_c.py::test_z@secure_kafka": 9.0,
        "examples/x/tests/test_d.py::test_w": 1.0,
    }
    assert timings.main([str(path), "--slowest", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "slowest 2 of 4 tests (setup + call + teardown):"
    assert lines[1].split() == ["9.0s", "tests/acceptance/test_c.py::test_z@secure_kafka"]
    assert lines[2].split() == ["2.8s", "tests/integration/test_a.py::test_x[postgres]"]
    tiers = {line.split(":")[0].strip(): line.split()[-1] for line in lines[4:]}
    assert tiers == {"unit": "0.1s", "integration": "2.8s", "acceptance": "9.0s", "other": "1.0s"}


def test_timings_skip_lines_that_are_not_theirs(tmp_path: Path) -> None:
    path = tmp_path / "timings.tsv"
    path.write_text(
        "garbage\n\ntests/unit/t.py::a\tcall\t1.5\tpassed\nx\ty\tz\n"
        "tests/unit/t.py::a\tcall\tslow\tpassed\n" + "\t" * 9
    )
    assert timings.read(path) == {"tests/unit/t.py::a": 1.5}


def test_timings_refuse_a_missing_file_and_a_count_below_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert timings.main([str(tmp_path / "none.tsv")]) == 1
    assert "no timings recorded" in capsys.readouterr().err
    for hostile in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as exit_:
            timings.main([str(tmp_path / "none.tsv"), "--slowest", hostile])
        assert exit_.value.code == 2


def test_a_reserved_port_is_held_from_other_binds_yet_a_server_can_take_it() -> None:
    port = reserved_port()
    with socket.socket() as plain, pytest.raises(OSError, match="in use") as taken:
        plain.bind(("127.0.0.1", port))  # no SO_REUSEADDR: the TIME_WAIT holds it
    assert taken.value.errno == errno.EADDRINUSE
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    ports = reserved_ports(4)
    assert len(set(ports)) == 4


def test_a_refusing_address_refuses_and_a_taken_port_cannot_be_bound() -> None:
    with refusing_address() as address:
        host, _, port = address.rpartition(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5)
    with taken_port() as port_number, socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError, match="in use") as failed:
            other.bind(("127.0.0.1", port_number))
        assert failed.value.errno == errno.EADDRINUSE
