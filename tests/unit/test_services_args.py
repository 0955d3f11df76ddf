"""scripts/services.py and its MariaDB without a server: what a URL given in MARIADB_URL may
be, that no password reaches the output, that `env` output stays values when eval'ed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import services
from scripts.service_common import ServiceError, redact
from scripts.service_mariadb import Files, mariadb_login, mariadb_status, mariadbd_args

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("url", "host", "port", "user", "password", "database"),
    [
        ("mysql://outbox:pw@127.0.0.1:53306/", "127.0.0.1", 53306, "outbox", "pw", ""),
        ("mariadb://outbox:pw@db/orders", "db", 3306, "outbox", "pw", "orders"),
        ("mysql+pymysql://u:p%40ss%2F@[::1]:3307/x", "::1", 3307, "u", "p@ss/", "x"),
        ("mysql://u@h/", "h", 3306, "u", "", ""),
    ],
)
def test_a_mariadb_url_is_read_into_its_parts(
    url: str, host: str, port: int, user: str, password: str, database: str
) -> None:
    login = mariadb_login(url)
    assert (login.host, login.port, login.user, login.password, login.database) == (
        host,
        port,
        user,
        password,
        database,
    )


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://outbox:{SECRET}@127.0.0.1:55432/outbox",
        f"http://outbox:{SECRET}@127.0.0.1/",
        f"outbox:{SECRET}@127.0.0.1:3306",
        f"MySQL ://outbox:{SECRET}@h/",
        f"mysql://outbox:{SECRET}@/",
        f"mysql://outbox:{SECRET}@h:99999/",
        f"mysql://outbox:{SECRET}@h:port/",
        f"mysql://outbox:{SECRET}@[::1/",
        "",
    ],
)
def test_a_url_that_is_not_mariadb_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ServiceError) as refused:
        mariadb_login(url)
    assert "MARIADB_URL" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_up_refuses_a_mariadb_url_of_another_kind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MARIADB_URL", f"postgresql://outbox:{SECRET}@127.0.0.1:55432/outbox")
    assert services.main(["up", "--only", "mariadb"]) == 1
    out = capsys.readouterr()
    assert "MARIADB_URL must be a mysql://" in out.err
    assert SECRET not in out.out + out.err


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://outbox:{SECRET}@127.0.0.1:53306/",
        f"mysql://outbox:{SECRET}@with@at@h/",
        f"mysql://outbox:a://{SECRET}@h/",
        f"outbox:{SECRET}@h:3306",
        f"mysql://outbox:{SECRET}@h/db?next=x@y",
    ],
)
def test_redact_never_shows_the_password(url: str) -> None:
    shown = redact(url)
    assert SECRET not in shown
    assert "outbox:***@" in shown


def test_redact_leaves_a_url_without_credentials_alone() -> None:
    assert redact("mysql://127.0.0.1:53306/") == "mysql://127.0.0.1:53306/"


def test_status_shows_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARIADB_URL", f"mysql://outbox:{SECRET}@127.0.0.1:53306/")
    line = mariadb_status()
    assert SECRET not in line
    assert "mysql://outbox:***@127.0.0.1:53306/" in line


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to eval the output")
def test_env_output_evaluates_to_the_values_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    planted = tmp_path / "planted"
    hostile = f"mysql://u:p'\"$(touch {planted})`touch {planted}`;touch {planted}@h:1/ x"
    monkeypatch.setenv("MARIADB_URL", hostile)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:56379/0")
    assert services.main(["env"]) == 0
    script = capsys.readouterr().out
    # A shell without the variables: only what the eval sets is there to print.
    shown = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf %s "$MARIADB_URL"', "bash", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout
    assert shown == hostile
    assert not planted.exists()


def test_only_names_a_known_service(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        services.main(["status", "--only", "mysql"])
    assert exited.value.code == 2
    assert "mariadb" in capsys.readouterr().err


@pytest.mark.parametrize(("durable", "flush"), [(True, "1"), (False, "2")])
def test_the_server_options_follow_durability_and_bind_loopback(
    durable: bool, flush: str, tmp_path: Path
) -> None:
    args = mariadbd_args(53306, Files(tmp_path), durable=durable)
    # mariadbd takes --no-defaults only as its first option.
    assert args[0] == "--no-defaults"
    assert "--bind-address=127.0.0.1" in args
    assert f"--innodb-flush-log-at-trx-commit={flush}" in args
    assert f"--datadir={tmp_path / 'data'}" in args


@pytest.mark.parametrize(("found", "root"), [(True, True), (False, True), (False, False)])
def test_mysqlclient_build_deps_are_installed_only_when_missing(
    monkeypatch: pytest.MonkeyPatch, found: bool, root: bool
) -> None:
    """bootstrap installs libmariadb-dev and pkg-config when pkg-config finds no libmariadb,
    and a user who cannot apt-get is told what to install instead."""
    from scripts import service_common

    installs: list[list[str]] = []
    checked = subprocess.CompletedProcess(["pkg-config"], 0 if found else 1, "", "")
    monkeypatch.setattr(service_common, "run", lambda *_, **__: checked)
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setattr(service_common, "apt_get_install", lambda p, **_: installs.append(p))
    if not found and not root:
        with pytest.raises(ServiceError, match="libmariadb-dev and pkg-config"):
            service_common.mysqlclient_build_deps()
    else:
        service_common.mysqlclient_build_deps()
    assert installs == ([["libmariadb-dev", "pkg-config"]] if root and not found else [])


@pytest.mark.parametrize(
    "argv", [["pause"], ["resume", "--only", "postgres"], ["pause", "--only", "mariadb"]]
)
def test_pause_and_resume_act_on_the_broker_alone(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Anything but `--only kafka` is refused before a signal is sent."""
    assert services.main(argv) == 1
    assert "--only kafka" in capsys.readouterr().err
