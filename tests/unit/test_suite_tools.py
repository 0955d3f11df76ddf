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
from tests.support import mariadb, timings


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


# A slice of MariaDB 10.11's SHOW ENGINE INNODB STATUS with tests side by side: one waiter
# on a row of db_a (in its SELECT, no id yet), one inserting in db_b, one on a table lock
# of db_a, and a transaction holding its locks (no wait).
INNODB_STATUS = """
------------
TRANSACTIONS
------------
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION (0x7f11a9291480), ACTIVE 10 sec starting index read
mysql tables in use 2, locked 2
LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)
MariaDB thread id 12988, OS thread handle 139713481316032, query id 68221 127.0.0.1 outbox Sending data
INSERT INTO processed_events (consumer_group, event_id, processed_at) SELECT 1
------- TRX HAS BEEN WAITING 9183141 us FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 21515 page no 5 n bits 320 index processed_events_group_age_idx of table `db_a`.`processed_events` trx id 0 lock mode S waiting
Record lock, heap no 2 PHYSICAL RECORD: n_fields 3; compact format; info bits 0

------------------
---TRANSACTION 545339, ACTIVE 8 sec inserting
LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)
MariaDB thread id 14155, OS thread handle 139713482544832, query id 74534 127.0.0.1 outbox Creating sort index
INSERT INTO processed_events (consumer_group, event_id, processed_at) SELECT 2
------- TRX HAS BEEN WAITING 8000000 us FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 21516 page no 5 n bits 320 index PRIMARY of table `db_b`.`processed_events` trx id 545339 lock mode S waiting
------------------
---TRANSACTION 545340, ACTIVE 2 sec
LOCK WAIT 1 lock struct(s), heap size 1128, 0 row lock(s)
MariaDB thread id 14160, OS thread handle 139713482544833, query id 74540 127.0.0.1 outbox Waiting
LOCK TABLES outbox_events WRITE
------- TRX HAS BEEN WAITING 2000000 us FOR THIS LOCK TO BE GRANTED:
TABLE LOCK table `db_a`.`outbox_events` trx id 545340 lock mode X waiting
------------------
---TRANSACTION 545335, ACTIVE 11 sec
2 lock struct(s), heap size 1128, 1 row lock(s), undo log entries 1
MariaDB thread id 14144, OS thread handle 139713478858432, query id 74444 127.0.0.1 outbox
--------
FILE I/O
--------
"""


def test_the_lock_monitor_s_waiters_are_counted_per_database() -> None:
    waiting = mariadb.waiting_transactions(INNODB_STATUS, "db_a")
    assert [block.splitlines()[0] for block in waiting] == [
        "---TRANSACTION (0x7f11a9291480), ACTIVE 10 sec starting index read",
        "---TRANSACTION 545340, ACTIVE 2 sec",
    ]
    assert "SELECT 1" in waiting[0]
    assert len(mariadb.waiting_transactions(INNODB_STATUS, "db_b")) == 1
    assert mariadb.waiting_transactions(INNODB_STATUS, "db") == []  # a prefix is not a match
    assert mariadb.waiting_transactions("", "db_a") == []
