"""A contender's subprocesses (log to a file each, SIGTERM to stop) and the environment the
relays get."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.compare.common import ROOT


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


def launch(name: str, cmd: list[str], env: dict[str, str], logdir: Path, cwd: Path = ROOT) -> Proc:
    """cwd: the tree whose code runs (`python -m` imports from it first)."""
    log = logdir / f"{name}.log"
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd
        )
    return Proc(name, popen, log)


def relay_env(url: str, bootstrap: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(
        OUTBOX_DATABASE_URL=url,
        OUTBOX_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        OUTBOX_TOPIC_PREFIX=prefix,
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    # The bench's broker listens in plaintext on 127.0.0.1; the relay wants it said.
    env["OUTBOX_KAFKA_SECURITY_PROTOCOL"] = "PLAINTEXT"
    # The ops endpoint stays on (a default) but on any free port: replicas, and other
    # relays on this machine, would otherwise collide on the fixed one.
    env["OUTBOX_HTTP_PORT"] = "0"
    return env


async def poll_until(
    done: Callable[[], Awaitable[bool]],
    proc: Proc,
    timeout_s: float,
    what: str,
    every_s: float = 0.02,
) -> None:
    """Every every_s until done(); raises once proc (the relay, or the floor loop) has exited
    or timeout_s has passed."""
    deadline = time.monotonic() + timeout_s
    while not await done():
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} in {timeout_s:.0f} s:\n{proc.tail()}")
        await asyncio.sleep(every_s)
