"""CPU seconds and resident memory of processes and the load average, read from /proc
(Linux only, no psutil).

`/proc/<pid>/stat` fields 14 and 15 are user and system time in clock ticks; VmHWM in
`/proc/<pid>/status` is the peak resident set size since the process started.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    pid: int
    cpu_s: float  # user + system, since the process started
    rss_bytes: int
    peak_rss_bytes: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    return text[text.rindex(")") + 2 :].split()


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, to quote beside any figure."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_seconds(pid: int) -> float | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # fields[0] is field 3 (state): utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds_with_reaped(pid: int) -> float | None:
    """User + system time of a process plus that of its children it has waited for.

    Postgres backends that exit are reaped by the postmaster: their time moves into its
    cutime and cstime (fields 16 and 17), so nothing is lost between two samples.
    """
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return sum(int(f) for f in fields[11:15]) / _TICK


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def _status_kb(pid: int, name: str) -> int | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return None


def sample(pid: int) -> ProcSample | None:
    """None when the process is gone."""
    cpu = cpu_seconds(pid)
    rss = _status_kb(pid, "VmRSS")
    hwm = _status_kb(pid, "VmHWM")
    if cpu is None or rss is None or hwm is None:
        return None
    return ProcSample(pid, cpu, rss * 1024, hwm * 1024)


def children(parent: int) -> list[int]:
    """Direct children of a process (for Postgres: its backends and helpers)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_pid(int(entry.name)) == parent:
            found.append(int(entry.name))
    return found


def total_cpu(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each live process among pids."""
    out: dict[int, float] = {}
    for pid in pids:
        cpu = cpu_seconds(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two samples; a process born in between counts from zero.

    A process that ended in between is not counted (its time is gone from /proc).
    """
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
