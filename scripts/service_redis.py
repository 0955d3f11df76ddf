"""The Redis of scripts/services.py: Debian's redis-server package (installed with apt-get
when missing, as Postgres is) running as a daemon the script owns, with its own data folder
under the cache, appendonly on (an acked XADD survives a restart), bound to 127.0.0.1 on
OUTBOX_REDIS_PORT. REDIS_URL, when set, is taken as given and only checked.

`redis_start` also serves tests that need a server of their own (restarted mid-run): any
port and data folder.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from scripts.service_common import RUN, ServiceError, installed, port_open, run, say

REDIS_PORT = int(os.environ.get("OUTBOX_REDIS_PORT", "56379"))
DEFAULT_REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"
REDIS_DATA = RUN / "redis"
REDIS_READY_TIMEOUT_S = 10.0


def redis_start(port: int, data: Path) -> None:
    """Start a daemonized redis-server on 127.0.0.1:port with AOF in `data`; wait for it."""
    binary = installed("redis-server", "redis-server", "Redis", "REDIS_URL")
    data.mkdir(parents=True, exist_ok=True)
    run(
        [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--protected-mode", "yes",
            "--dir", str(data),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "yes",
            "--pidfile", str(data / "redis.pid"),
            "--logfile", str(data / "redis.log"),
        ]
    )  # fmt: skip
    deadline = time.monotonic() + REDIS_READY_TIMEOUT_S
    while not redis_ping(port):
        if time.monotonic() > deadline:
            raise ServiceError(f"redis did not answer on {port}; see {data / 'redis.log'}")
        time.sleep(0.05)


def redis_ping(port: int) -> bool:
    if not port_open(port):
        return False
    cli = shutil.which("redis-cli")
    if cli is None:
        return True
    done = run([cli, "-h", "127.0.0.1", "-p", str(port), "ping"], check=False)
    return done.stdout.strip() == "PONG"


def redis_pid(data: Path = REDIS_DATA) -> int | None:
    try:
        pid = int((data / "redis.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def redis_stop(data: Path, timeout_s: float = 10.0) -> None:
    """SIGTERM (redis flushes its AOF and exits) and wait for the process to go."""
    pid = redis_pid(data)
    if pid is None:
        return
    os.kill(pid, 15)
    deadline = time.monotonic() + timeout_s
    while redis_pid(data) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


def redis_up() -> str:
    url = os.environ.get("REDIS_URL")
    if url:
        say("redis: using REDIS_URL as given")
        return url
    if redis_ping(REDIS_PORT):
        return DEFAULT_REDIS_URL
    redis_start(REDIS_PORT, REDIS_DATA)
    return DEFAULT_REDIS_URL


def redis_down() -> None:
    if os.environ.get("REDIS_URL"):
        say("redis: REDIS_URL is set; not stopping a server this script does not own")
        return
    redis_stop(REDIS_DATA)
    say("redis: stopped")
