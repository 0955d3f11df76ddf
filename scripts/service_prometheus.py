"""Prometheus and promtool for the monitoring tests: Debian's prometheus package (installed
with apt-get when missing, without its recommended node exporter), never left running.

Unlike Postgres, Kafka and Redis there is no shared server: a test starts its own with
`prometheus_start` (loopback only, its own config and data folder) and stops it after.

Usage: scripts/service_prometheus.py install   print the paths of prometheus and promtool
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

if str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.service_common import ServiceError, apt_install

PROMETHEUS_READY_TIMEOUT_S = 30.0


POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


@contextlib.contextmanager
def _no_service_starts() -> Iterator[None]:
    """The package's maintainer scripts would start a Prometheus on 0.0.0.0:9090 as a
    system service; a policy-rc.d that refuses (exit 101, invoke-rc.d's and
    deb-systemd-invoke's convention) keeps it from starting. One already there is kept."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text(
        "#!/bin/sh\n# scripts/service_prometheus.py: no service starts\nexit 101\n"
    )
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def _installed(binary: str) -> Path:
    found = shutil.which(binary)
    if found is None:
        if os.geteuid() == 0:
            with _no_service_starts():
                apt_install("prometheus", "Prometheus", "PATH", recommends=False)
        else:
            apt_install("prometheus", "Prometheus", "PATH", recommends=False)  # says what to do
        found = shutil.which(binary)
    if found is None:
        raise ServiceError(f"apt-get installed prometheus but no {binary} was found on PATH")
    return Path(found)


def promtool() -> Path:
    """promtool (checks and unit-tests rule files), installing Debian's prometheus once."""
    return _installed("promtool")


def prometheus() -> Path:
    """The prometheus server binary, installing Debian's prometheus once."""
    return _installed("prometheus")


def prometheus_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def prometheus_start(config: Path, data: Path, port: int) -> subprocess.Popen[bytes]:
    """A Prometheus server on 127.0.0.1:port with `config` and its TSDB in `data`, ready
    to answer queries. The caller stops it (terminate, then wait)."""
    data.mkdir(parents=True, exist_ok=True)
    log = (data / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            str(prometheus()),
            f"--config.file={config}",
            f"--storage.tsdb.path={data / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + PROMETHEUS_READY_TIMEOUT_S
    while not prometheus_ready(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            text = (data / "prometheus.log").read_text(errors="replace")[-2000:]
            raise ServiceError(f"prometheus did not become ready on {port}:\n{text}")
        time.sleep(0.1)
    return proc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/service_prometheus.py", description=__doc__)
    parser.add_argument("action", choices=["install"])
    parser.parse_args(argv)
    try:
        print(prometheus())
        print(promtool())
    except (ServiceError, subprocess.CalledProcessError) as exc:
        print(f"[prometheus] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
