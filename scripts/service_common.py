"""What the servers of scripts/services.py share: the cache folder and the files in it, the
login of the local databases, the error they report, and small process, socket and URL
helpers.

The cache is OUTBOX_CACHE_DIR (default /var/cache/outbox-relay as root, else
~/.cache/outbox-relay): RUN holds the running servers' data and logs, and the Kafka jars are
cached next to it in a folder named after KAFKA_VERSION.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The postgres user must reach the cluster's folder, and root's home is closed to it.
_DEFAULT_CACHE = (
    Path("/var/cache/outbox-relay")
    if os.geteuid() == 0
    else Path.home() / ".cache" / "outbox-relay"
)
CACHE = Path(os.environ.get("OUTBOX_CACHE_DIR", _DEFAULT_CACHE))
RUN = CACHE / "run"

KAFKA_VERSION = "4.1.1"

# The local Postgres and MariaDB log in as this user with this password (trust auth on
# Postgres). The password differs from the user so that redaction does not mask "outbox".
LOCAL_USER = "outbox"
LOCAL_PASSWORD = "outbox-local-dev"


class ServiceError(Exception):
    """A service could not be started or reached; the message says what to do."""


@dataclass(frozen=True)
class Paths:
    pg_data: Path = RUN / "postgres"
    pg_log: Path = RUN / "postgres.log"
    kafka_libs: Path = CACHE / f"kafka-{KAFKA_VERSION}" / "libs"
    kafka_home: Path = RUN / "kafka"

    @property
    def kafka_data(self) -> Path:
        return self.kafka_home / "data"

    @property
    def kafka_props(self) -> Path:
        return self.kafka_home / "server.properties"

    @property
    def kafka_log4j(self) -> Path:
        return self.kafka_home / "log4j2.properties"

    @property
    def kafka_pid(self) -> Path:
        return self.kafka_home / "kafka.pid"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_home / "server.log"


P = Paths()


def say(msg: str) -> None:
    print(f"[services] {msg}", flush=True)


def run(
    cmd: Sequence[str], *, check: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=check, text=True, capture_output=True, **kw)  # type: ignore[call-overload, no-any-return]


def apt_install(package: str, name: str, url_var: str, *, recommends: bool = True) -> None:
    """Install Debian's `package` with apt-get (root only); ServiceError says what to do
    otherwise (install it, or point url_var at a running server)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(
            f"{name} is not installed and this user cannot apt-get install it; "
            f"install Debian's {package} package or set {url_var}."
        )
    say(f"installing Debian's {package} package (one time)")
    apt_get_install([package], recommends=recommends)


# What mysqlclient (the `mysqlclient` extra) builds against: it has no Linux wheels, and
# its build finds the MariaDB client library through pkg-config.
MYSQLCLIENT_BUILD_PACKAGES = ("libmariadb-dev", "pkg-config")


def mysqlclient_build_deps() -> None:
    """Installs MYSQLCLIENT_BUILD_PACKAGES with apt-get (root only) unless pkg-config
    already finds libmariadb; ServiceError says what to install otherwise."""
    if (
        shutil.which("pkg-config")
        and run(["pkg-config", "--exists", "libmariadb"], check=False).returncode == 0
    ):
        return
    packages = list(MYSQLCLIENT_BUILD_PACKAGES)
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(
            "mysqlclient builds against the MariaDB client library, which pkg-config does "
            f"not find, and this user cannot apt-get install it: install Debian's "
            f"{' and '.join(packages)} (or your system's MariaDB client development files)"
        )
    say(f"installing Debian's {', '.join(packages)} for mysqlclient's build (one time)")
    apt_get_install(packages, recommends=False)


def installed(binary: str, package: str, name: str, url_var: str, **apt: bool) -> str:
    """The path of the server `binary`, from Debian's `package` (installed first when the
    binary is missing: apt_install, which `apt` options go to)."""
    found = find_binary(binary)
    if found:
        return found
    apt_install(package, name, url_var, **apt)
    found = find_binary(binary)
    if not found:
        raise ServiceError(f"apt-get installed {package} but no {binary} was found")
    return found


def find_binary(binary: str) -> str | None:
    """`binary` on PATH, or in /usr/sbin, where Debian puts servers and a user's PATH may
    not reach."""
    sbin = Path("/usr/sbin") / binary
    return shutil.which(binary) or (str(sbin) if sbin.exists() else None)


def apt_get_install(packages: Sequence[str], *, recommends: bool = True) -> None:
    """apt-get update and install, one process at a time: tests running side by side may
    each install a package they need, and dpkg takes one installer at once."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    extra = [] if recommends else ["--no-install-recommends"]
    with machine_lock("apt"):
        run(["apt-get", *wait, "update", "-q"], env=env)
        run(["apt-get", *wait, "install", "-y", "-q", *extra, *packages], env=env)


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Holds the lock `name` (a file in the cache) for the block: work that processes side
    by side (test workers, checkouts) must not do at once, such as installing packages,
    building images or a wheel from a source tree."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def redact(url: str) -> str:
    """The URL with its password masked. Never print a password, even the test one: the
    same code prints user DSNs. The password runs to the last "@" (a raw "@" in it is
    still a password), and a URL without a scheme is masked too."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" not in rest:
        return url
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
