"""The PgBouncer of scripts/services.py: Debian's pgbouncer package (installed with apt-get
when missing, as Postgres and Redis are) in front of the project's Postgres, in transaction
pooling mode and otherwise with the package's stock settings (no ignore_startup_parameters,
so a client that sends `options` is refused, as on most production poolers). It runs as a
daemon the script owns, with its config, log and pid file in a folder under the cache, and
listens on 127.0.0.1:OUTBOX_PGBOUNCER_PORT only. PGBOUNCER_URL, when set, is taken as given.

`pgbouncer_start` also serves tests that need a pooler of their own: any port and folder.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from scripts.service_common import RUN, ServiceError, installed, port_open, run, say
from scripts.service_postgres import DEFAULT_DATABASE_URL, PG_DB, PG_PASSWORD, PG_USER

PGBOUNCER_PORT = int(os.environ.get("OUTBOX_PGBOUNCER_PORT", "56433"))
PGBOUNCER_DATA = RUN / "pgbouncer"
PGBOUNCER_READY_TIMEOUT_S = 10.0


def _login(server_url: str) -> tuple[str, str, str]:
    """(user, password, database) of the Postgres URL the pooler fronts."""
    split = urlsplit(server_url)
    return (
        unquote(split.username or PG_USER),
        unquote(split.password or PG_PASSWORD),
        split.path.lstrip("/") or PG_DB,
    )


def pgbouncer_url(port: int = PGBOUNCER_PORT, server_url: str = DEFAULT_DATABASE_URL) -> str:
    """The pooler's URL: the same role and database as the server's, through the pooler."""
    user, password, db = _login(server_url)
    return f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/{db}"


DEFAULT_PGBOUNCER_URL = pgbouncer_url()


def pgbouncer_config(
    port: int, data: Path, server_url: str, extra: Mapping[str, str] | None = None
) -> str:
    """The package's stock settings (its defaults: max_client_conn 100, default_pool_size
    20, no ignore_startup_parameters) with pool_mode=transaction, loopback only, no Unix
    socket, md5 auth against a userlist of the project's one role, every database name
    passed through to the server. extra: settings to add (a test's non-stock pooler)."""
    server = urlsplit(server_url)
    return "\n".join(
        [
            "[databases]",
            # Every database name to the same server (the tests make one database each).
            f"* = host={server.hostname} port={server.port or 5432}",
            "",
            "[pgbouncer]",
            f"logfile = {data / 'pgbouncer.log'}",
            f"pidfile = {data / 'pgbouncer.pid'}",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = md5",
            f"auth_file = {data / 'userlist.txt'}",
            "pool_mode = transaction",
            *(f"{name} = {value}" for name, value in (extra or {}).items()),
            "",
        ]
    )


def _as_owner(cmd: list[str]) -> list[str]:
    # pgbouncer refuses to run as root; the postgres user (the package's) runs it.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def pgbouncer_start(
    port: int,
    data: Path,
    server_url: str = DEFAULT_DATABASE_URL,
    extra: Mapping[str, str] | None = None,
) -> str:
    """Start a daemonized pgbouncer on 127.0.0.1:port in front of server_url's Postgres,
    its files in `data`; wait until it takes connections. Returns its URL."""
    binary = installed("pgbouncer", "pgbouncer", "PgBouncer", "PGBOUNCER_URL")
    data.mkdir(parents=True, exist_ok=True)
    ini = data / "pgbouncer.ini"
    ini.write_text(pgbouncer_config(port, data, server_url, extra))
    user, password, _ = _login(server_url)
    (data / "userlist.txt").write_text(f'"{user}" "{password}"\n')
    if os.geteuid() == 0:
        for path in (data, ini, data / "userlist.txt"):
            shutil.chown(path, "postgres", "postgres")
        (data / "userlist.txt").chmod(0o600)
    done = run(_as_owner([binary, "-d", str(ini)]), check=False)
    if done.returncode != 0:
        raise ServiceError(f"pgbouncer did not start: {done.stdout}{done.stderr}")
    url = pgbouncer_url(port, server_url)
    deadline = time.monotonic() + PGBOUNCER_READY_TIMEOUT_S
    while not pgbouncer_ready(url):
        if time.monotonic() > deadline:
            raise ServiceError(f"pgbouncer did not answer on {port}; see {data / 'pgbouncer.log'}")
        time.sleep(0.05)
    return url


def pgbouncer_ready(url: str) -> bool:
    split = urlsplit(url)
    if not port_open(split.port or 6432, split.hostname or "127.0.0.1"):
        return False
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5, prepare_threshold=None) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def pgbouncer_pid(data: Path = PGBOUNCER_DATA) -> int | None:
    try:
        pid = int((data / "pgbouncer.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def pgbouncer_stop(data: Path, timeout_s: float = 10.0) -> None:
    """SIGINT (a safe shutdown: pgbouncer waits for its clients' transactions) and wait."""
    pid = pgbouncer_pid(data)
    if pid is None:
        return
    os.kill(pid, 2)
    deadline = time.monotonic() + timeout_s
    while pgbouncer_pid(data) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if pgbouncer_pid(data) is not None:
        os.kill(pid, 15)


def pgbouncer_up(server_url: str) -> str:
    url = os.environ.get("PGBOUNCER_URL")
    if url:
        say("pgbouncer: using PGBOUNCER_URL as given")
        return url
    url = pgbouncer_url(PGBOUNCER_PORT, server_url)
    if pgbouncer_pid() is not None and pgbouncer_ready(url):
        return url
    if port_open(PGBOUNCER_PORT):
        raise ServiceError(
            f"port {PGBOUNCER_PORT} is taken by another process; set OUTBOX_PGBOUNCER_PORT "
            "or PGBOUNCER_URL"
        )
    return pgbouncer_start(PGBOUNCER_PORT, PGBOUNCER_DATA, server_url)


def pgbouncer_down() -> None:
    if os.environ.get("PGBOUNCER_URL"):
        say("pgbouncer: PGBOUNCER_URL is set; not stopping a pooler this script does not own")
        return
    pgbouncer_stop(PGBOUNCER_DATA)
    say("pgbouncer: stopped")
