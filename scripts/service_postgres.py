"""The Postgres of scripts/services.py: Debian's postgresql package (installed with apt-get when
missing and run as root) in a cluster of its own under the cache folder, listening on
127.0.0.1:OUTBOX_PG_PORT, with the role and database of DEFAULT_DATABASE_URL. DATABASE_URL,
when set, is taken as given and only checked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from scripts.service_common import (
    LOCAL_PASSWORD,
    LOCAL_USER,
    P,
    ServiceError,
    apt_install,
    port_open,
    redact,
    run,
    say,
)

PG_PORT = int(os.environ.get("OUTBOX_PG_PORT", "55432"))
# Extra server options appended to the defaults, e.g. "-c wal_level=logical" (the relay
# benchmark runs its own cluster with it for Debezium). They apply when the script starts
# the server; a running server keeps the options it was started with.
PG_EXTRA_OPTIONS = os.environ.get("OUTBOX_PG_OPTIONS", "").strip()
# "0": the cluster runs with fsync and full_page_writes off, for the test suite (a crash of
# the machine may then corrupt it; a stop or a crash of Postgres alone does not). Anything
# else, or unset: both on, as in production, for demos and benchmarks. Applied by every
# `up`, to a running cluster too (both settings take effect on reload).
PG_DURABLE = os.environ.get("OUTBOX_PG_DURABLE", "1") != "0"
PG_USER = LOCAL_USER
PG_PASSWORD = LOCAL_PASSWORD
PG_DB = "outbox"
DEFAULT_DATABASE_URL = f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{PG_PORT}/{PG_DB}"


def pg_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parent)
    return candidates[-1].parent if candidates else None


def as_postgres(cmd: Sequence[str]) -> list[str]:
    # initdb refuses to run as root, so the cluster belongs to the postgres user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


def pg_install() -> Path:
    found = pg_bin()
    if found:
        return found
    apt_install("postgresql", "Postgres", "DATABASE_URL")
    found = pg_bin()
    if not found:
        raise ServiceError("apt-get installed postgresql but no pg_ctl was found")
    return found


def pg_running(bindir: Path) -> bool:
    if not (P.pg_data / "PG_VERSION").exists():
        return False
    return (
        run(
            as_postgres([str(bindir / "pg_ctl"), "-D", str(P.pg_data), "status"]), check=False
        ).returncode
        == 0
    )


def pg_up() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        pg_check(url)
        say(f"postgres: using DATABASE_URL as given ({redact(url)})")
        return url
    bindir = pg_install()
    if not (P.pg_data / "PG_VERSION").exists():
        say(f"postgres: creating a cluster in {P.pg_data}")
        shutil.rmtree(P.pg_data, ignore_errors=True)
        P.pg_data.mkdir(parents=True, mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(P.pg_data, "postgres", "postgres")
        res = run(
            as_postgres(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(P.pg_data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                ]
            ),
            check=False,
        )
        if res.returncode != 0:
            raise ServiceError(f"initdb failed:\n{res.stderr}")
    if not pg_running(bindir):
        if port_open(PG_PORT):
            raise ServiceError(
                f"port {PG_PORT} is taken by another process; set OUTBOX_PG_PORT or DATABASE_URL"
            )
        if os.geteuid() == 0:
            P.pg_log.touch()
            shutil.chown(P.pg_log, "postgres", "postgres")
        # track_commit_timestamp lets tests compare id order with real commit order.
        opts = (
            f"-p {PG_PORT} -k {P.pg_data} -c listen_addresses=127.0.0.1"
            " -c max_connections=300 -c track_commit_timestamp=on"
        )
        if PG_EXTRA_OPTIONS:
            opts += f" {PG_EXTRA_OPTIONS}"
        res = run(
            as_postgres(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(P.pg_data),
                    "-l",
                    str(P.pg_log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=False,
        )
        if res.returncode != 0:
            tail = P.pg_log.read_text(errors="replace")[-2000:] if P.pg_log.exists() else ""
            raise ServiceError(f"postgres did not start:\n{res.stdout}{res.stderr}\n{tail}")
    psql = [
        str(bindir / "psql"),
        "-h",
        str(P.pg_data),
        "-p",
        str(PG_PORT),
        "-U",
        "postgres",
        "-v",
        "ON_ERROR_STOP=1",
        "-qAt",
    ]
    exists = run(
        as_postgres([*psql, "-c", f"SELECT 1 FROM pg_roles WHERE rolname = '{PG_USER}'"])
    ).stdout.strip()
    if not exists:
        run(
            as_postgres(
                [*psql, "-c", f"CREATE ROLE {PG_USER} LOGIN SUPERUSER PASSWORD '{PG_PASSWORD}'"]
            )
        )
    exists = run(
        as_postgres([*psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DB}'"])
    ).stdout.strip()
    if not exists:
        run(as_postgres([*psql, "-c", f"CREATE DATABASE {PG_DB} OWNER {PG_USER}"]))
    durability = (
        ["ALTER SYSTEM RESET fsync", "ALTER SYSTEM RESET full_page_writes"]
        if PG_DURABLE
        else ["ALTER SYSTEM SET fsync = off", "ALTER SYSTEM SET full_page_writes = off"]
    )
    for statement in [*durability, "SELECT pg_reload_conf()"]:
        run(as_postgres([*psql, "-c", statement]))
    pg_check(DEFAULT_DATABASE_URL)
    return DEFAULT_DATABASE_URL


def pg_check(url: str) -> None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise ServiceError(f"cannot connect to Postgres at {redact(url)}: {exc}") from exc


def pg_down() -> None:
    bindir = pg_bin()
    if bindir and pg_running(bindir):
        run(as_postgres([str(bindir / "pg_ctl"), "-D", str(P.pg_data), "-m", "fast", "-w", "stop"]))
        say("postgres: stopped")
    else:
        say("postgres: not running")
