"""Start, stop and inspect the Postgres, Kafka, Redis, PgBouncer and MariaDB that tests, demos
and benchmarks use.

Both servers are real: Debian's postgresql in a cluster this script owns, and Apache Kafka
(KRaft, one combined node) assembled from Maven Central into a cache folder. Everything
binds to 127.0.0.1. Redis (the second transport) is Debian's redis-server with AOF on, in a
data folder of its own (scripts/service_redis.py). PgBouncer is Debian's pgbouncer in
transaction pooling mode in front of that Postgres (scripts/service_pgbouncer.py). MariaDB
(the third database) is Debian's mariadb-server in a data folder of its own
(scripts/service_mariadb.py). When DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, REDIS_URL,
PGBOUNCER_URL or MARIADB_URL is set, that service is taken as given and only checked.

Usage: scripts/services up|down|status|env [--only postgres|kafka|redis|pgbouncer|mariadb]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# Run as a script, this folder is first on sys.path, not the checkout the modules below are in.
if str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The names below are this module's interface too (tests/support/secure_kafka.py reads P and
# port_open as `scripts.services.*`); __all__ lists them.
from scripts.service_common import (
    CACHE,
    KAFKA_VERSION,
    ROOT,
    RUN,
    P,
    Paths,
    ServiceError,
    port_open,
    redact,
    run,
    say,
)
from scripts.service_kafka import (
    DEFAULT_BOOTSTRAP,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    KAFKA_READY_TIMEOUT_S,
    java_cmd,
    kafka_down,
    kafka_fetch,
    kafka_format,
    kafka_pid,
    kafka_ready,
    kafka_start,
    kafka_up,
    kafka_write_config,
)
from scripts.service_mariadb import DEFAULT_MARIADB_URL, mariadb_down, mariadb_status, mariadb_up
from scripts.service_pgbouncer import (
    PGBOUNCER_DATA,
    pgbouncer_down,
    pgbouncer_pid,
    pgbouncer_up,
    pgbouncer_url,
)
from scripts.service_postgres import (
    DEFAULT_DATABASE_URL,
    PG_DB,
    PG_EXTRA_OPTIONS,
    PG_PASSWORD,
    PG_PORT,
    PG_USER,
    as_postgres,
    pg_bin,
    pg_check,
    pg_down,
    pg_install,
    pg_running,
    pg_up,
)
from scripts.service_redis import DEFAULT_REDIS_URL, REDIS_DATA, redis_down, redis_pid, redis_up

__all__ = [
    "CACHE",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_MARIADB_URL",
    "DEFAULT_REDIS_URL",
    "KAFKA_CONTROLLER_PORT",
    "KAFKA_PORT",
    "KAFKA_READY_TIMEOUT_S",
    "KAFKA_VERSION",
    "PG_DB",
    "PG_EXTRA_OPTIONS",
    "PG_PASSWORD",
    "PG_PORT",
    "PG_USER",
    "ROOT",
    "RUN",
    "P",
    "Paths",
    "ServiceError",
    "as_postgres",
    "java_cmd",
    "kafka_down",
    "kafka_fetch",
    "kafka_format",
    "kafka_pid",
    "kafka_ready",
    "kafka_start",
    "kafka_up",
    "kafka_write_config",
    "main",
    "pg_bin",
    "pg_check",
    "pg_down",
    "pg_install",
    "pg_running",
    "pg_up",
    "port_open",
    "redact",
    "run",
    "say",
    "status",
]


# Every service, in the order `up` starts them.
SERVICES = ["postgres", "kafka", "redis", "pgbouncer", "mariadb"]


def status() -> int:
    bindir = pg_bin()
    pg = "running" if bindir and pg_running(bindir) else "stopped"
    say(
        f"postgres: {pg} ({redact(os.environ.get('DATABASE_URL', DEFAULT_DATABASE_URL))}), data {P.pg_data}"
    )
    pid = kafka_pid()
    kafka = f"running pid {pid}" if pid else "stopped"
    say(
        f"kafka: {kafka} ({os.environ.get('KAFKA_BOOTSTRAP_SERVERS', DEFAULT_BOOTSTRAP)}), logs {P.kafka_log}"
    )
    rpid = redis_pid()
    redis = f"running pid {rpid}" if rpid else "stopped"
    say(f"redis: {redis} ({os.environ.get('REDIS_URL', DEFAULT_REDIS_URL)}), data {REDIS_DATA}")
    bpid = pgbouncer_pid()
    pooler = f"running pid {bpid}" if bpid else "stopped"
    say(f"pgbouncer: {pooler} ({redact(_pgbouncer_url())}), files {PGBOUNCER_DATA}")
    say(mariadb_status())
    return 0


def _pgbouncer_url() -> str:
    return os.environ.get("PGBOUNCER_URL") or pgbouncer_url(
        server_url=os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/services",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action",
        choices=["up", "down", "status", "env", "pause", "resume"],
        help="pause / resume: SIGSTOP / SIGCONT the Kafka broker (fault tests: a broker that "
        "hangs without closing its connections)",
    )
    parser.add_argument(
        "--only",
        choices=SERVICES,
        help="act on one service only",
    )
    args = parser.parse_args(argv)
    want = {args.only} if args.only else set(SERVICES)
    try:
        RUN.mkdir(parents=True, exist_ok=True)
        RUN.chmod(0o755)
        if args.action == "up":
            t0 = time.monotonic()
            pg_url = os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)
            if "postgres" in want:
                pg_url = pg_up()
                say(f"postgres: ready at {redact(pg_url)} in {time.monotonic() - t0:.1f}s")
            t1 = time.monotonic()
            if "kafka" in want:
                boot = kafka_up()
                say(f"kafka: ready at {boot} in {time.monotonic() - t1:.1f}s")
            t2 = time.monotonic()
            if "redis" in want:
                url = redis_up()
                say(f"redis: ready at {url} in {time.monotonic() - t2:.1f}s")
            t3 = time.monotonic()
            if "pgbouncer" in want:
                url = pgbouncer_up(pg_url)
                say(f"pgbouncer: ready at {redact(url)} in {time.monotonic() - t3:.1f}s")
            t4 = time.monotonic()
            if "mariadb" in want:
                url = mariadb_up()
                say(f"mariadb: ready at {redact(url)} in {time.monotonic() - t4:.1f}s")
            say(f"all up in {time.monotonic() - t0:.1f}s; stop with: scripts/services down")
        elif args.action == "down":
            if "mariadb" in want:
                mariadb_down()
            if "pgbouncer" in want:
                pgbouncer_down()
            if "redis" in want:
                redis_down()
            if "kafka" in want:
                kafka_down()
            if "postgres" in want:
                pg_down()
        elif args.action in ("pause", "resume"):
            if want != {"kafka"}:
                raise ServiceError("pause and resume act on the broker only: --only kafka")
            pid = kafka_pid()
            if pid is None:
                raise ServiceError("kafka is not running")
            os.kill(pid, signal.SIGSTOP if args.action == "pause" else signal.SIGCONT)
            say(f"kafka: {'paused' if args.action == 'pause' else 'resumed'} (pid {pid})")
        elif args.action == "status":
            return status()
        else:
            exports = {
                "DATABASE_URL": os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL),
                "KAFKA_BOOTSTRAP_SERVERS": os.environ.get(
                    "KAFKA_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP
                ),
                "REDIS_URL": os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
                "PGBOUNCER_URL": _pgbouncer_url(),
                "MARIADB_URL": os.environ.get("MARIADB_URL", DEFAULT_MARIADB_URL),
            }
            # The output is eval'ed by a shell: a value given in the environment is quoted,
            # so whatever it holds stays a value.
            for name, value in exports.items():
                print(f"export {name}={shlex.quote(value)}")
    except ServiceError as exc:
        print(f"[services] ERROR: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(
            f"[services] ERROR: {' '.join(exc.cmd)} failed ({exc.returncode}):\n{exc.stdout}{exc.stderr}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
