"""A relay or a consumer as a child process, its output in a log file: for kills, pauses
and signals that an in-process service cannot take."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ChildProcess:
    """`python <args>` from the repository root, stdout and stderr appended to log_path."""

    def __init__(
        self, args: list[str], env: dict[str, str], log_path: Path, name: str = ""
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            env=env,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        """For until(alive=...): a wait fails at once when the process has exited."""
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(
                f"{self.name or 'the process'} exited {code}:\n{self.log()[-3000:]}"
            )

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> int:
        self.signal(signal.SIGKILL)
        return self.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.returncode is not None:
                self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
