"""Helpers for the deployment tests: rendering the chart, reading pods out of manifests,
the restricted Pod Security Standard, and loading a container's environment through the
relay's own settings model."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.config import RelaySettings, load_settings
from relay.errors import RelayConfigError

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "outbox-relay"
EXAMPLE_APP = CHART / "examples" / "app-with-sidecar"
KUBE_VERSION = "1.30.0"  # the API version rendered for and validated against

# Placeholders for values that come from Secrets or the downward API at run time.
PLACEHOLDER_DATABASE_URL = "postgresql://relay:placeholder-pw@db.invalid:5432/outbox"
PLACEHOLDER_POD_NAME = "outbox-relay-7d9f8-abcde"
PLACEHOLDER_POD_IP = "10.244.1.17"


@dataclass(frozen=True)
class Rendered:
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def pods(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(object name, pod spec) of every workload."""
        for doc in self.docs:
            spec = doc.get("spec", {})
            if doc.get("kind") == "Pod":
                yield doc["metadata"]["name"], spec
            elif doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
                yield f"{doc['kind']}/{doc['metadata']['name']}", spec["template"]["spec"]


def helm_template(
    helm: Path,
    chart: Path,
    values: list[Path] | None = None,
    *,
    release: str = "rel",
    set_values: list[str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm), "template", release, str(chart), "--kube-version", KUBE_VERSION]
    cmd += ["--namespace", "outbox"]
    for path in values or []:
        cmd += ["-f", str(path)]
    for item in set_values or []:
        cmd += ["--set", item]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"helm template failed:\n{res.stderr}")
    return res


def parse(manifests: str) -> Rendered:
    return Rendered([d for d in yaml.safe_load_all(manifests) if d])


def example_app(tmp: Path) -> Path:
    """The worked sidecar example, with this chart in its charts/ folder (what
    `helm dependency update` would put there)."""
    app = tmp / "app-with-sidecar"
    shutil.copytree(EXAMPLE_APP, app)
    packaged = app / "charts" / "outbox-relay"
    shutil.copytree(CHART, packaged, ignore=shutil.ignore_patterns("examples", "ci"))
    return app


# --------------------------------------------------------------------------- Pod Security


ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """Every way this pod spec breaks the "restricted" Pod Security Standard (baseline
    checks included), field by field as kubernetes.io/docs/concepts/security/
    pod-security-standards lists them; plus a read-only root file system, which this
    project requires of its own containers."""
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"spec.{field} is true")
    if pod.get("hostUsers") is False:
        pass  # user namespaces are allowed
    for vol in pod.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            out.append(f"volume {vol['name']} uses {sorted(kinds - ALLOWED_VOLUME_TYPES)}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"unsafe sysctl {sysctl.get('name')}")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        out.append("pod seccompProfile is Unconfined")
    pod_apparmor = (psc.get("appArmorProfile") or {}).get("type")
    if pod_apparmor == "Unconfined":
        out.append("pod appArmorProfile is Unconfined")
    for key, value in (pod.get("metadata", {}).get("annotations") or {}).items():
        if (
            key.startswith("container.apparmor.security.beta.kubernetes.io/")
            and value not in ("runtime/default",)
            and not str(value).startswith("localhost/")
        ):
            out.append(f"annotation {key}={value}")
    selinux = psc.get("seLinuxOptions") or {}
    if selinux.get("user") or selinux.get("role"):
        out.append("pod seLinuxOptions sets user or role")
    if selinux.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t"):
        out.append(f"pod seLinuxOptions type {selinux.get('type')}")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser is 0")
    containers = [
        *(("container", c) for c in pod.get("containers") or []),
        *(("initContainer", c) for c in pod.get("initContainers") or []),
        *(("ephemeralContainer", c) for c in pod.get("ephemeralContainers") or []),
    ]
    if not containers:
        out.append("no containers")
    for kind, c in containers:
        where = f"{kind} {c.get('name')}"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities.drop lacks ALL")
        added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"{where}: adds capabilities {sorted(added)}")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{where}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{where}: runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault/Localhost")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}: appArmorProfile is Unconfined")
        c_selinux = sc.get("seLinuxOptions") or {}
        if c_selinux.get("user") or c_selinux.get("role"):
            out.append(f"{where}: seLinuxOptions sets user or role")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{where}: procMount {sc.get('procMount')}")
        if sc.get("windowsOptions", {}).get("hostProcess"):
            out.append(f"{where}: windows hostProcess")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{where}: hostPort {port['hostPort']}")
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(f"{where}: readOnlyRootFilesystem is not true")
    return out


# --------------------------------------------------------------------------- settings


def container_files(
    pod: Mapping[str, Any], container: Mapping[str, Any], root: Path
) -> dict[str, Path]:
    """Each file the container sees from Secret / ConfigMap volumes (by its path inside the
    container), materialised under root with placeholder content."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    files: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        vol = volumes[mount["name"]]
        source = vol.get("secret") or vol.get("configMap")
        if source is None:
            continue
        for item in source.get("items") or []:
            inside = f"{mount['mountPath'].rstrip('/')}/{item['path']}"
            local = root / inside.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(f"placeholder for {item['key']}\n")
            files[inside] = local
    return files


def resolved_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], root: Path
) -> dict[str, str]:
    """The container's environment as the process would see it: secretKeyRef and fieldRef
    replaced by placeholders, paths into mounted volumes by local copies. A path that
    points into no mounted file is kept, so the settings model reports it."""
    files = container_files(pod, container, root)
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            value = str(item["value"])
        else:
            ref = item["valueFrom"]
            if "secretKeyRef" in ref:
                value = PLACEHOLDER_DATABASE_URL if name.endswith("DATABASE_URL") else "secret"
            elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
                value = PLACEHOLDER_POD_IP
            elif "fieldRef" in ref:
                value = PLACEHOLDER_POD_NAME
            else:
                raise AssertionError(f"{name}: unexpected valueFrom {ref}")
        env[name] = str(files.get(value, value))
    return env


def load_relay_settings(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> RelaySettings:
    """load_settings() on exactly this OUTBOX_* environment (nothing else of ours leaks in)."""
    with monkeypatch.context() as m:
        for name in list(os.environ):
            if name.startswith("OUTBOX_"):
                m.delenv(name)
        for name, value in env.items():
            m.setenv(name, value)
        return load_settings()


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    return {prefix.rstrip("."): value}


def _dump(settings: RelaySettings) -> dict[str, Any]:
    return _flat(settings.model_dump())


def _alternatives(value: str) -> list[str]:
    """Other values of the same shape: a setting that reads the variable must either
    reject one of them or end up different."""
    if value.lower() in ("true", "false"):
        return ["false" if value.lower() == "true" else "true"]
    try:
        number = int(value)
        return [str(number + 1), str(number * 2 + 3)]
    except ValueError:
        pass
    try:
        real = float(value)
        return [repr(real * 2 + 1.5)]
    except ValueError:
        pass
    return [value + "-x", "x" + value, ""]


def assert_env_is_relay_settings(
    monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]
) -> RelaySettings:
    """Loads env through the relay's settings model, then proves every OUTBOX_* variable
    in it is read: pydantic-settings ignores variables that name no setting, so a renamed
    setting would otherwise go unnoticed. Raises AssertionError naming the variable."""
    try:
        settings = load_relay_settings(monkeypatch, env)
    except RelayConfigError as exc:
        raise AssertionError(f"the relay rejects this environment: {exc}") from None
    baseline = _dump(settings)
    # Fields that differ between two loads of the same environment (generated defaults)
    # cannot tell anything.
    unstable = {
        k for k, v in _dump(load_relay_settings(monkeypatch, env)).items() if baseline.get(k) != v
    }
    stable = {k: v for k, v in baseline.items() if k not in unstable}
    ignored = []
    for name, value in env.items():
        if not name.startswith("OUTBOX_"):
            continue
        for alternative in _alternatives(value):
            try:
                other = load_relay_settings(monkeypatch, {**env, name: alternative})
            except Exception:  # RelayConfigError, or pydantic-settings' own SettingsError
                break  # the relay parsed or validated the value: the setting is read
            changed = {k: v for k, v in _dump(other).items() if k not in unstable}
            if changed != stable:
                break
        else:
            ignored.append(name)
    assert not ignored, f"not relay settings (changing them changes nothing): {ignored}"
    return settings
