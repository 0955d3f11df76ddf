"""The Postgres and Kafka the comparison runs on: its own in BENCH_CACHE (scripts/services.py,
wal_level=logical for Debezium), or the ones DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS name;
and a throwaway Postgres with wal_level=logical for a bench that runs Debezium beside the
environment's servers."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.compare.common import BENCH_PG_OPTIONS, PYTHON, ROOT, Q, say
from bench.shared import procstat
from scripts.ports import reserved_port


@dataclass
class Services:
    url: str  # the server's own database (admin statements)
    bootstrap: str
    own: bool  # started by this program in BENCH_CACHE
    cache: Path | None = None

    @property
    def pg_data(self) -> Path | None:
        return self.cache / "run" / "postgres" if self.cache else None

    def postgres_pids(self) -> list[int]:
        if self.pg_data is None:
            return []
        try:
            main = int((self.pg_data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [main, *procstat.children(main)]

    def postgres_cpu(self) -> dict[int, float]:
        """CPU seconds of the postmaster (with the backends it reaped) and its live children."""
        pids = self.postgres_pids()
        if not pids:
            return {}
        cpu = procstat.total_cpu(pids[1:])
        main = procstat.cpu_seconds_with_reaped(pids[0])
        if main is not None:
            cpu[pids[0]] = main
        return cpu

    def kafka_pids(self) -> list[int]:
        if self.cache is None:
            return []
        try:
            return [int((self.cache / "run" / "kafka" / "kafka.pid").read_text().strip())]
        except (OSError, ValueError):
            return []


def services_env(cache: Path, pg_port: int, kafka_port: int) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS")
    }
    env.update(
        OUTBOX_CACHE_DIR=str(cache),
        OUTBOX_PG_PORT=str(pg_port),
        OUTBOX_KAFKA_PORT=str(kafka_port),
        OUTBOX_PG_OPTIONS=BENCH_PG_OPTIONS,
    )
    return env


def run_services(env: dict[str, str], *args: str) -> None:
    res = subprocess.run(
        [PYTHON, str(ROOT / "scripts" / "services.py"), *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    for line in (res.stdout + res.stderr).splitlines():
        say(line)
    if res.returncode != 0:
        raise RuntimeError(f"scripts/services.py {' '.join(args)} failed")


def postgres_url(port: int) -> str:
    """The admin URL of a cluster scripts/services.py started on port (local trust auth)."""
    return f"postgresql://outbox:outbox@127.0.0.1:{port}/outbox"


@contextmanager
def logical_postgres() -> Iterator[str]:
    """A Postgres cluster of this run's own with wal_level=logical, in a temporary cache
    folder on a free port, stopped and removed on the way out: its admin URL. The servers
    other programs use are never restarted for it."""
    cache = Path(tempfile.mkdtemp(prefix="outbox-bench-pg-"))
    cache.chmod(0o755)  # the cluster belongs to the postgres user, who must reach it
    env = services_env(cache, reserved_port(), 0)
    say(f"services: a wal_level=logical Postgres in {cache} (postgres :{env['OUTBOX_PG_PORT']})")
    try:
        run_services(env, "up", "--only", "postgres")
        yield postgres_url(int(env["OUTBOX_PG_PORT"]))
    finally:
        try:
            run_services(env, "down", "--only", "postgres")
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def server_settings(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(Q["server_settings"]).fetchone()
    assert row is not None
    return tuple(row)


def start_services(args: argparse.Namespace) -> Services:
    if args.services == "env":
        url, boot = os.environ.get("DATABASE_URL"), os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not url or not boot:
            raise RuntimeError(
                "--services env needs DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS "
                '(eval "$(.venv/bin/python scripts/services.py env)")'
            )
        return Services(url, boot, own=False)
    cache = Path(args.cache_dir)
    env = services_env(cache, args.pg_port, args.kafka_port)
    say(
        f"services: scripts/services.py up in {cache} (postgres :{args.pg_port}, kafka :{args.kafka_port})"
    )
    run_services(env, "up")
    url = postgres_url(args.pg_port)
    if server_settings(url)[1] != "logical":
        say("services: switching the bench Postgres to wal_level=logical (restart)")
        run_services(env, "down", "--only", "postgres")
        run_services(env, "up", "--only", "postgres")
        if server_settings(url)[1] != "logical":
            raise RuntimeError("the bench Postgres did not come up with wal_level=logical")
    return Services(url, f"127.0.0.1:{args.kafka_port}", own=True, cache=cache)
