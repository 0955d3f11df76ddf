"""The MariaDB of scripts/services.py: Debian's mariadb-server package (installed with apt-get
when missing, as Postgres is) in a data folder of its own under the cache, started with
`mariadbd --no-defaults` (the package's /etc/mysql settings do not apply) as the mysql user,
listening on 127.0.0.1:OUTBOX_MARIADB_PORT only, with a user `outbox` that may create
databases. MARIADB_URL, when set, is taken as given and only checked.

MARIADB_URL names a server, not a database (`mysql://outbox:...@127.0.0.1:53306/`): each
test creates a database of its own on it (tests/support/mariadb.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from scripts.service_common import (
    LOCAL_PASSWORD,
    LOCAL_USER,
    RUN,
    ServiceError,
    installed,
    machine_lock,
    port_open,
    redact,
    run,
    say,
)

MARIADB_PORT = int(os.environ.get("OUTBOX_MARIADB_PORT", "53306"))
# "0": InnoDB writes its log at each commit but flushes it to disk about once a second
# (innodb_flush_log_at_trx_commit=2), for the test suite: a crash of the machine may lose
# the last second of commits, a crash of MariaDB alone loses nothing. Anything else, or
# unset: a flush per commit, as in production, for demos and benchmarks. Applied by every
# `up`, to a running server too (the setting is dynamic). No binary log is written either way.
MARIADB_DURABLE = os.environ.get("OUTBOX_MARIADB_DURABLE", "1") != "0"
MARIADB_HOME = RUN / "mariadb"
DEFAULT_MARIADB_URL = f"mysql://{LOCAL_USER}:{LOCAL_PASSWORD}@127.0.0.1:{MARIADB_PORT}/"
MARIADB_READY_TIMEOUT_S = 60.0
# The schemes that name MariaDB (and MySQL) in this project's URLs.
SCHEMES = ("mysql", "mariadb", "mysql+pymysql")


@dataclass(frozen=True)
class Login:
    """Where and as whom a MariaDB URL connects; `database` is '' for a server URL."""

    host: str
    port: int
    user: str
    password: str
    database: str


def mariadb_login(url: str) -> Login:
    """The parts of a mysql:// or mariadb:// URL; ServiceError (never quoting the password)
    for anything else."""
    try:
        split = urlsplit(url)
        port = split.port or 3306
    except ValueError as exc:
        raise ServiceError(f"MARIADB_URL is not a valid URL ({redact(url)}): {exc}") from None
    if split.scheme not in SCHEMES:
        names = [f"{scheme}://" for scheme in SCHEMES]
        raise ServiceError(
            f"MARIADB_URL must be a {', '.join(names[:-1])} or {names[-1]} URL, not {redact(url)}"
        )
    if not split.hostname:
        raise ServiceError(f"MARIADB_URL names no host: {redact(url)}")
    return Login(
        host=split.hostname,
        port=port,
        user=unquote(split.username or ""),
        password=unquote(split.password or ""),
        database=unquote(split.path.lstrip("/")),
    )


@dataclass(frozen=True)
class Files:
    """The files of one private server: its data folder, socket, pid file and logs."""

    home: Path

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def socket(self) -> Path:
        return self.home / "mariadbd.sock"

    @property
    def pid(self) -> Path:
        return self.home / "mariadbd.pid"

    @property
    def log(self) -> Path:
        return self.home / "mariadbd.log"


def mariadbd_args(port: int, files: Files, *, durable: bool) -> list[str]:
    """The server's options; --no-defaults keeps the package's config files out of it."""
    args = [
        "--no-defaults",
        f"--datadir={files.data}",
        f"--socket={files.socket}",
        f"--pid-file={files.pid}",
        f"--log-error={files.log}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        # Accounts match the client's address, never a name looked up in DNS.
        "--skip-name-resolve",
        # The server's built-in default is latin1; Debian's config (skipped) sets utf8mb4.
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_unicode_ci",
        "--innodb-buffer-pool-size=256M",
        "--max-connections=300",
        f"--innodb-flush-log-at-trx-commit={flush_log_at_commit(durable)}",
    ]
    if os.geteuid() == 0:
        # mariadbd refuses to run as root; it drops to the package's user itself.
        args.append("--user=mysql")
    return args


def flush_log_at_commit(durable: bool) -> int:
    return 1 if durable else 2


def _client(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise ServiceError(
            f"{name} is not on PATH; install Debian's mariadb-client (mariadb-server brings it)"
        )
    return found


def _as_root(files: Files) -> list[str]:
    """The command line of the server's root account over its socket (no password: the
    socket lives in a folder only this machine reaches)."""
    return [_client("mariadb"), "--no-defaults", f"--socket={files.socket}", "-uroot", "-NB"]


def mariadb_pid(files: Files | None = None) -> int | None:
    """The running server's pid, or None (no pid file, or its process is gone or is not
    mariadbd: a pid left by a crash may since name another process)."""
    pid_file = (files or Files(MARIADB_HOME)).pid
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
        comm = Path(f"/proc/{pid}/comm")
        if comm.exists() and comm.read_text().strip() != "mariadbd":
            return None
    except (OSError, ValueError):
        return None
    return pid


def _initialize(files: Files) -> None:
    """mariadb-install-db into a fresh folder, renamed into place when it succeeded: a run
    cut short leaves no half-made data folder behind."""
    say(f"mariadb: creating a data folder in {files.data}")
    fresh = files.data.with_name("data.tmp")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True, mode=0o700)
    user = []
    if os.geteuid() == 0:
        shutil.chown(fresh, "mysql", "mysql")
        user = ["--user=mysql"]
    done = run(
        [
            _client("mariadb-install-db"),
            "--no-defaults",
            *user,
            f"--datadir={fresh}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=False,
    )
    if done.returncode != 0:
        raise ServiceError(f"mariadb-install-db failed:\n{done.stdout}{done.stderr}")
    fresh.rename(files.data)


def mariadb_start(port: int, files: Files, *, durable: bool = True) -> None:
    """Start mariadbd on 127.0.0.1:port with its files in `files.home` (made on first use);
    wait until it answers on its socket."""
    # The server, its clients and mariadb-install-db are all in the package's Depends.
    binary = installed("mariadbd", "mariadb-server", "MariaDB", "MARIADB_URL", recommends=False)
    files.home.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(files.home, "mysql", "mysql")
    if not files.data.is_dir():
        _initialize(files)
    if port_open(port):
        raise ServiceError(
            f"port {port} is taken by another process; set OUTBOX_MARIADB_PORT or MARIADB_URL"
        )
    with open(files.home / "mariadbd.out", "wb") as out:
        proc = subprocess.Popen(
            [binary, *mariadbd_args(port, files, durable=durable)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + MARIADB_READY_TIMEOUT_S
    while not _answers(files):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = files.log.read_text(errors="replace")[-2000:] if files.log.exists() else ""
            raise ServiceError(f"mariadbd did not start; see {files.log}:\n{tail}")
        time.sleep(0.1)


def _answers(files: Files) -> bool:
    admin = [_client("mariadb-admin"), "--no-defaults", f"--socket={files.socket}", "-uroot"]
    return run([*admin, "--connect-timeout=2", "ping"], check=False).returncode == 0


def mariadb_configure(files: Files, *, durable: bool) -> None:
    """The `outbox` user (every right, GRANT OPTION included, so it can create the tests'
    databases) with the local password, and the durability of this run."""
    user = f"'{LOCAL_USER}'@'127.0.0.1'"
    statements = [
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{LOCAL_PASSWORD}'",
        f"ALTER USER {user} IDENTIFIED BY '{LOCAL_PASSWORD}'",
        f"GRANT ALL PRIVILEGES ON *.* TO {user} WITH GRANT OPTION",
        f"SET GLOBAL innodb_flush_log_at_trx_commit = {flush_log_at_commit(durable)}",
    ]
    # On stdin: statements with a password stay out of the process list.
    run(_as_root(files), input="".join(f"{s};\n" for s in statements))


def mariadb_check(url: str) -> None:
    """Connect over TCP as the URL says and run a query; ServiceError when that fails."""
    login = mariadb_login(url)
    command = [
        _client("mariadb"),
        "--no-defaults",
        "--protocol=TCP",
        f"--host={login.host}",
        f"--port={login.port}",
        f"--user={login.user}",
        "--connect-timeout=10",
        "-NB",
        "-e",
        "SELECT 1",
    ]
    if login.database:
        command.append(f"--database={login.database}")
    # The client reads the password from its environment: not on a command line ps shows.
    env = {**os.environ, "MYSQL_PWD": login.password}
    done = run(command, check=False, env=env)
    if done.returncode != 0 or done.stdout.strip() != "1":
        raise ServiceError(
            f"cannot connect to MariaDB at {redact(url)}: {done.stderr.strip() or done.stdout}"
        )


def mariadb_up() -> str:
    url = os.environ.get("MARIADB_URL")
    if url:
        mariadb_check(url)
        say(f"mariadb: using MARIADB_URL as given ({redact(url)})")
        return url
    files = Files(MARIADB_HOME)
    # Two checkouts running `up` at once must not both initialize or start the server.
    with machine_lock("mariadb"):
        if mariadb_pid(files) is None or not _answers(files):
            mariadb_start(MARIADB_PORT, files, durable=MARIADB_DURABLE)
        mariadb_configure(files, durable=MARIADB_DURABLE)
    mariadb_check(DEFAULT_MARIADB_URL)
    return DEFAULT_MARIADB_URL


def mariadb_stop(files: Files, timeout_s: float = 60.0) -> None:
    """SIGTERM (InnoDB shuts down cleanly and mariadbd removes its pid file) and wait;
    SIGKILL if it has not gone by timeout_s."""
    pid = mariadb_pid(files)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while mariadb_pid(files) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    if mariadb_pid(files) is not None:
        os.kill(pid, signal.SIGKILL)


def mariadb_down() -> None:
    if os.environ.get("MARIADB_URL"):
        say("mariadb: MARIADB_URL is set; not stopping a server this script does not own")
        return
    if mariadb_pid() is None:
        say("mariadb: not running")
        return
    mariadb_stop(Files(MARIADB_HOME))
    say("mariadb: stopped")


def mariadb_status() -> str:
    pid = mariadb_pid()
    state = f"running pid {pid}" if pid else "stopped"
    url = os.environ.get("MARIADB_URL", DEFAULT_MARIADB_URL)
    return f"mariadb: {state} ({redact(url)}), data {Files(MARIADB_HOME).data}"
