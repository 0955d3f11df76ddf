"""The tools and images the deployment tests need, installed and built when missing.

- podman, buildah, runc, fuse-overlayfs, slirp4netns, uidmap and debootstrap from Debian's
  packages; podman runs OCI images without a Docker engine. The project keeps its own
  containers.conf, storage.conf and registries.conf, and its image store, in the cache
  folder (CACHE/containers), so nothing of the machine's own podman setup is touched.
- A Debian base image made with debootstrap from Debian's mirror (no container registry
  is needed), and on it local stand-ins for python:3.11-slim, postgres:15 and
  apache/kafka (tests/deployment/images), then the project's Dockerfile.
- helm, built with the Go toolchain from the Go module proxy into CACHE/tools.

Everything is cached: a second run only checks. Usage:
  scripts/containers.py setup      tools, config and every image
  scripts/containers.py helm       print the path of helm (building it once)
  scripts/containers.py env        export lines for podman with the project's config
  scripts/containers.py size       the relay image's size
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import services  # noqa: E402
from scripts.service_common import apt_get_install  # noqa: E402

CACHE = services.CACHE
STATE = CACHE / "containers"
CONF = STATE / "conf"
IMAGES_DIR = ROOT / "tests" / "deployment" / "images"

APT_TOOLS = {  # binary -> Debian package
    "podman": "podman",
    "buildah": "buildah",
    "runc": "runc",
    "fuse-overlayfs": "fuse-overlayfs",
    "slirp4netns": "slirp4netns",
    "newuidmap": "uidmap",
    "debootstrap": "debootstrap",
}

SUITE = "bookworm"  # Debian 12: python3 is 3.11, postgresql 15, openjdk 17
DEFAULT_MIRROR = "http://deb.debian.org/debian"

PREFIX = "localhost/outbox-relay-ci"
DEBIAN_IMAGE = f"{PREFIX}/debian:{SUITE}-minbase"
PYTHON_IMAGE = f"{PREFIX}/python:3.11-slim"
POSTGRES_IMAGE = f"{PREFIX}/postgres:15"
KAFKA_IMAGE = f"{PREFIX}/kafka:{services.KAFKA_VERSION}"
# The same Kafka image under a Confluent-like version tag: testcontainers'
# KafkaContainer.with_kraft() accepts only tags >= 7.0.0 (Confluent Platform numbering).
KAFKA_CP_IMAGE = f"{PREFIX}/kafka-as-cp:7.6.0"
RELAY_IMAGE = "localhost/outbox-relay:dev"

HELM_VERSION = "v3.22.0"
HELM_DIR = CACHE / "tools" / f"helm-{HELM_VERSION}"
GO_DIR = CACHE / "go"


class ContainersError(Exception):
    """A tool could not be installed or an image not built; the message says why."""


def say(msg: str) -> None:
    print(f"[containers] {msg}", flush=True)


def _run(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
    what: str = "",
) -> str:
    res = subprocess.run(
        list(cmd),
        env=dict(env) if env is not None else None,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if res.returncode != 0:
        raise ContainersError(
            f"{what or cmd[0]} failed ({res.returncode}): {' '.join(cmd)}\n"
            f"{res.stdout[-4000:]}{res.stderr[-4000:]}"
        )
    return res.stdout


# --------------------------------------------------------------------------- tools


def _which(binary: str) -> str | None:
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin:/usr/bin:/bin")


def ensure_tools() -> None:
    """apt-get install the container tools that are missing (once per machine)."""
    missing = sorted({pkg for binary, pkg in APT_TOOLS.items() if not _which(binary)})
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ContainersError(
            f"missing {', '.join(missing)} and this user cannot apt-get install them; "
            "install them (Debian packages) or run as root"
        )
    say(f"installing {' '.join(missing)} from Debian's packages (one time)")
    try:
        apt_get_install(missing)
    except subprocess.CalledProcessError as exc:
        raise ContainersError(f"apt-get install {' '.join(missing)} failed:\n{exc.stderr}") from exc


def write_config() -> None:
    """The project's own podman configuration (see /etc/containers for the machine's)."""
    CONF.mkdir(parents=True, exist_ok=True)
    run_root = (
        Path("/run/outbox-relay/containers")
        if os.geteuid() == 0
        else Path(os.environ.get("XDG_RUNTIME_DIR", f"/tmp/outbox-relay-{os.getuid()}"))
        / "outbox-relay-containers"
    )
    files = {
        # Root may not raise RLIMIT_NOFILE above 20000 on these machines, and cgroups are
        # mixed v1/v2, which crun refuses and runc handles.
        "containers.conf": (
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
        ),
        "storage.conf": (
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{STATE / "storage"}"\n'
            f'runroot = "{run_root}"\n'
        ),
        # No registry is reachable here: images are local, short names resolve to
        # docker.io without a prompt (and fail fast if ever pulled).
        "registries.conf": (
            'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n'
        ),
    }
    for name, text in files.items():
        path = CONF / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def podman_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for podman, buildah and podman-compose with the project's config."""
    env = dict(os.environ if base is None else base)
    env.update(
        CONTAINERS_CONF=str(CONF / "containers.conf"),
        CONTAINERS_STORAGE_CONF=str(CONF / "storage.conf"),
        CONTAINERS_REGISTRIES_CONF=str(CONF / "registries.conf"),
    )
    return env


def podman(*args: str, timeout: float = 1800, what: str = "") -> str:
    return _run(["podman", *args], env=podman_env(), timeout=timeout, what=what or "podman")


def image_exists(name: str) -> bool:
    return (
        subprocess.run(
            ["podman", "image", "exists", name], env=podman_env(), check=False
        ).returncode
        == 0
    )


def image_size(name: str) -> int:
    """Bytes of the image, all layers (base included), as `podman images` counts them."""
    return int(podman("image", "inspect", "--format", "{{.Size}}", name).strip())


def setup() -> None:
    ensure_tools()
    write_config()


# --------------------------------------------------------------------------- images


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    if os.environ.get("OUTBOX_DEBIAN_MIRROR"):
        return os.environ["OUTBOX_DEBIAN_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        uris: list[str] = re.findall(r"^\s*URIs:\s*(\S+)", text, re.M)
        uris += re.findall(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.M)
        for uri in uris:
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def _host_ca_files() -> list[tuple[Path, str]]:
    """The host's CA bundle and extra CAs: HTTPS from inside a build sees the same proxy."""
    found = []
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.exists():
        found.append((bundle, "etc/ssl/certs/ca-certificates.crt"))
    for extra in sorted(Path("/usr/local/share/ca-certificates").glob("*.crt")):
        found.append((extra, f"usr/local/share/ca-certificates/{extra.name}"))
    return found


def debian_rootfs_tar() -> Path:
    """debootstrap --variant=minbase, once, kept as a tarball in the cache."""
    tar = STATE / f"debian-{SUITE}-minbase.tar"
    if tar.exists():
        return tar
    STATE.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    say(f"debootstrap {SUITE} (minbase) from {mirror} (one time, about a minute)")
    with tempfile.TemporaryDirectory(dir=STATE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(
            ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror],
            timeout=1200,
            what="debootstrap",
        )
        for src, rel in _host_ca_files():
            dest = rootfs / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        for leftover in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            leftover.unlink()
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".tmp")
        with tarfile.open(partial, "w") as out:
            out.add(rootfs, arcname=".")
        partial.rename(tar)
    return tar


def debian_image() -> str:
    if not image_exists(DEBIAN_IMAGE):
        tar = debian_rootfs_tar()
        say(f"importing {DEBIAN_IMAGE}")
        podman("import", "--change", 'CMD ["/bin/bash"]', str(tar), DEBIAN_IMAGE, what="import")
    return DEBIAN_IMAGE


def build(
    tag: str,
    context: Path,
    *,
    containerfile: Path | None = None,
    build_args: Mapping[str, str] | None = None,
    extra_tags: Sequence[str] = (),
) -> str:
    """podman build with its layer cache: an unchanged build takes seconds."""
    t0 = time.monotonic()
    cmd = ["build", "--layers", "--pull=never", "-t", tag]
    for extra in extra_tags:
        cmd += ["-t", extra]
    if containerfile is not None:
        cmd += ["-f", str(containerfile)]
    for key, value in (build_args or {}).items():
        cmd += ["--build-arg", f"{key}={value}"]
    podman(*cmd, str(context), what=f"podman build {tag}")
    say(f"built {tag} in {time.monotonic() - t0:.1f}s")
    return tag


def python_image() -> str:
    base = debian_image()
    return build(PYTHON_IMAGE, IMAGES_DIR / "python", build_args={"DEBIAN_IMAGE": base})


def postgres_image() -> str:
    base = debian_image()
    return build(POSTGRES_IMAGE, IMAGES_DIR / "postgres", build_args={"DEBIAN_IMAGE": base})


def kafka_image() -> str:
    base = debian_image()
    services.kafka_fetch()  # the jars scripts/services.py runs the host broker from
    context = STATE / "kafka-context"
    libs = context / "libs"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(IMAGES_DIR / "kafka", context)
    shutil.copytree(services.P.kafka_libs, libs)
    return build(
        KAFKA_IMAGE,
        context,
        build_args={"DEBIAN_IMAGE": base},
        extra_tags=[KAFKA_CP_IMAGE],
    )


def relay_image(tag: str = RELAY_IMAGE) -> str:
    """The project's Dockerfile, built on the local python stand-in."""
    base = python_image()
    return build(tag, ROOT, build_args={"BASE_IMAGE": base})


def all_images() -> dict[str, str]:
    return {
        "relay": relay_image(),
        "postgres": postgres_image(),
        "kafka": kafka_image(),
    }


# --------------------------------------------------------------------------- helm


def go_binary() -> str:
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if not found:
        raise ContainersError(
            "the Go toolchain is needed once to build helm (go install helm.sh/helm/v3/cmd/helm); "
            "put `go` on PATH"
        )
    return found


def helm() -> Path:
    """helm, built once from the Go module proxy into the cache."""
    binary = HELM_DIR / "helm"
    if binary.exists():
        return binary
    HELM_DIR.mkdir(parents=True, exist_ok=True)
    say(f"building helm {HELM_VERSION} with go install (one time, a few minutes)")
    env = {
        **os.environ,
        "GOPATH": str(GO_DIR),
        "GOMODCACHE": str(GO_DIR / "pkg" / "mod"),
        "GOCACHE": str(GO_DIR / "build"),
        "GOBIN": str(HELM_DIR),
        "GOFLAGS": "-mod=mod",
        "CGO_ENABLED": "0",
    }
    _run(
        [go_binary(), "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        env=env,
        timeout=1800,
        what="go install helm",
    )
    if not binary.exists():
        raise ContainersError(f"go install finished but {binary} is missing")
    return binary


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/containers.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["setup", "helm", "env", "size"])
    args = parser.parse_args(argv)
    try:
        if args.action == "helm":
            print(helm())
            return 0
        setup()
        if args.action == "env":
            for key in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF"):
                print(f"export {key}={podman_env()[key]}")
        elif args.action == "size":
            print(f"{RELAY_IMAGE}: {image_size(relay_image()) / 1e6:.1f} MB")
        else:
            t0 = time.monotonic()
            for name, tag in all_images().items():
                say(f"{name}: {tag}")
            helm()
            say(f"ready in {time.monotonic() - t0:.1f}s")
    except ContainersError as exc:
        print(f"[containers] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
