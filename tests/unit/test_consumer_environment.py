"""Consumer settings from OUTBOX_CONSUMER_* and `outbox-consumer run` flags, and the app's
import from --app-dir: good values arrive, bad ones are refused naming the variable (never
echoing the value), and flags that could not reach the app are refused too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from consumer_lib import ConsumerConfigError, ConsumerSettings, ConsumerSettingsError, SettingFault
from consumer_lib.cli import add_app_dir
from consumer_lib.environment import set_flags

pytestmark = pytest.mark.usefixtures("clean_consumer_env")

BASE = {"bootstrap_servers": "kafka:9092", "kafka_security_protocol": "PLAINTEXT"}
CANARY = "canary-s3cret-value"


def test_environment_wins_over_code_and_flags_over_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_CONSUMER_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("OUTBOX_CONSUMER_BATCH", "false")
    monkeypatch.setenv("outbox_consumer_http_port", "9401")  # any case, as the relay's
    s = ConsumerSettings.from_env(group_id="billing", max_attempts=9, batch_max_records=7, **BASE)
    assert (s.group_id, s.max_attempts, s.batch, s.http_port) == ("billing", 3, False, 9401)
    assert s.batch_max_records == 7
    assert s.security is not None
    assert s.security.protocol == "PLAINTEXT"
    set_flags({"max_attempts": "4", "group_id": "from-flag"})
    s = ConsumerSettings.from_env(group_id="billing", **BASE)
    assert (s.group_id, s.max_attempts) == ("from-flag", 4)


def test_defaults_are_the_same_in_code_and_from_the_environment() -> None:
    from_env = ConsumerSettings.from_env(group_id="g", **BASE)
    in_code = ConsumerSettings(
        bootstrap_servers="kafka:9092", group_id="g", security=from_env.security
    )
    assert from_env == in_code


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("MAX_ATTEMPTS", "abc", "max_attempts (OUTBOX_CONSUMER_MAX_ATTEMPTS)"),
        ("MAX_ATTEMPTS", "0", "max_attempts (OUTBOX_CONSUMER_MAX_ATTEMPTS)"),
        ("HTTP_PORT", "70000", "http_port (OUTBOX_CONSUMER_HTTP_PORT)"),
        ("MISSING_EVENT_ID", "bogus", "missing_event_id (OUTBOX_CONSUMER_MISSING_EVENT_ID)"),
        ("BATCH", "perhaps", "batch (OUTBOX_CONSUMER_BATCH)"),
        ("GROUP_ID", "", "group_id (OUTBOX_CONSUMER_GROUP_ID)"),
        ("BACKOFF_BASE_S", "-1", "backoff_base_s (OUTBOX_CONSUMER_BACKOFF_BASE_S)"),
        ("BATCH_MAX_BYTES", "9" * 400, "batch_max_bytes"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, named: str
) -> None:
    monkeypatch.setenv(f"OUTBOX_CONSUMER_{name}", value)
    with pytest.raises(ConsumerConfigError, match="invalid consumer configuration") as err:
        ConsumerSettings.from_env(group_id="g", **BASE)
    assert named in str(err.value)
    if len(value) > 3:
        assert value not in str(err.value)


def test_required_settings_are_named() -> None:
    with pytest.raises(ConsumerConfigError) as err:
        ConsumerSettings.from_env()
    text = str(err.value)
    assert "OUTBOX_CONSUMER_BOOTSTRAP_SERVERS" in text
    assert "OUTBOX_CONSUMER_GROUP_ID" in text


def test_the_security_protocol_must_be_chosen() -> None:
    with pytest.raises(ConsumerConfigError, match="OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL"):
        ConsumerSettings.from_env(group_id="g", bootstrap_servers="kafka:9092")


def test_an_unknown_setting_in_code_is_refused() -> None:
    for make in (ConsumerSettings, ConsumerSettings.from_env):
        with pytest.raises(ConsumerSettingsError) as err:
            make(group_id="g", max_atempts=3, **BASE)
        assert [(p.name, p.fault) for p in err.value.problems] == [
            ("max_atempts", SettingFault.UNKNOWN)
        ]


def test_secrets_come_from_files_and_are_never_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text(CANARY + "\n")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SASL_USERNAME", "billing")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE", str(secret))
    s = ConsumerSettings.from_env(group_id="g", bootstrap_servers="kafka:9092")
    assert s.security is not None
    assert s.security.sasl_password == CANARY
    assert CANARY not in repr(s)
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "absent"))
    with pytest.raises(ConsumerConfigError, match="cannot read SASL password file"):
        ConsumerSettings.from_env(group_id="g", bootstrap_servers="kafka:9092")
    # An inline password with a contradictory protocol: refused, the password not echoed.
    monkeypatch.delenv("OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD", CANARY)
    with pytest.raises(ConsumerConfigError) as err:
        ConsumerSettings.from_env(group_id="g", bootstrap_servers="kafka:9092")
    assert "SASL settings are given but the protocol is SSL" in str(err.value)
    assert CANARY not in str(err.value)


def test_add_app_dir_puts_it_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert add_app_dir(str(tmp_path)) == str(tmp_path.resolve())
    assert sys.path[0] == str(tmp_path.resolve())
    with pytest.raises(ConsumerConfigError, match="is not a directory"):
        add_app_dir(str(tmp_path / "absent"))


# ------------------------------------------------------------------ the command line

APP_IN_CODE = """
from consumer_lib import ConsumerApp, ConsumerSettings, KafkaSecurity, SqlAlchemySync
from sqlalchemy import create_engine
app = ConsumerApp(
    ConsumerSettings(bootstrap_servers="kafka:9092", group_id="g",
                     security=KafkaSecurity.plaintext()),
    SqlAlchemySync(create_engine("sqlite://")),
)
"""

# A factory that records the settings it was given, then returns no app (exit 2): the
# command stops before connecting to anything.
FACTORY = """
from pathlib import Path
from consumer_lib import ConsumerSettings
def make():
    s = ConsumerSettings.from_env(group_id="in-code")
    Path("seen.txt").write_text(f"{s.group_id} {s.max_attempts} {s.batch}")
    return None
"""


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("OUTBOX_CONSUMER_")}
    return subprocess.run(
        [sys.executable, "-m", "consumer_lib.cli", *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def service(tmp_path: Path) -> Path:
    app_dir = tmp_path / "service"
    app_dir.mkdir()
    (app_dir / "svc_in_code.py").write_text(APP_IN_CODE)
    (app_dir / "svc_factory.py").write_text(FACTORY)
    return app_dir


def test_flags_reach_a_factory_through_from_env(service: Path) -> None:
    result = _cli(
        service,
        "run",
        "svc_factory:make",
        "--max-attempts",
        "7",
        "--no-batch",
        "--bootstrap-servers",
        "kafka:9092",
        OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        OUTBOX_CONSUMER_GROUP_ID="from-env",
    )
    assert result.returncode == 2
    assert "expected a ConsumerApp, got NoneType" in result.stderr
    assert (service / "seen.txt").read_text() == "from-env 7 False"


def test_app_dir_other_than_the_working_directory(service: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _cli(
        elsewhere,
        "run",
        "svc_factory:make",
        "--app-dir",
        str(service),
        OUTBOX_CONSUMER_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        OUTBOX_CONSUMER_GROUP_ID="g",
        OUTBOX_CONSUMER_BOOTSTRAP_SERVERS="kafka:9092",
    )
    assert "expected a ConsumerApp" in result.stderr  # imported from --app-dir
    missing = _cli(elsewhere, "run", "svc_factory:make")  # the working directory: not there
    assert missing.returncode == 2
    assert "cannot import 'svc_factory'" in missing.stderr
    assert "looked in --app-dir" in missing.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--app-dir", "/no/such/dir"], "--app-dir '/no/such/dir' is not a directory"),
        (["--app-dir", "svc_factory.py"], "--app-dir 'svc_factory.py' is not a directory"),
        (["--max-attempts", "zero"], "max_attempts (OUTBOX_CONSUMER_MAX_ATTEMPTS)"),
        (["--http-port", "-5"], "http_port (OUTBOX_CONSUMER_HTTP_PORT)"),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(service: Path, args: list[str], says: str) -> None:
    result = _cli(
        service, "run", "svc_factory:make", *args, OUTBOX_CONSUMER_BOOTSTRAP_SERVERS="k:1"
    )
    assert result.returncode == 2
    assert says in result.stderr


def test_flags_an_app_in_code_would_ignore_are_refused(service: Path) -> None:
    result = _cli(service, "run", "svc_in_code:app", "--max-attempts", "3")
    assert result.returncode == 2
    assert "settings flags were given (--max-attempts)" in result.stderr
    assert "ConsumerSettings.from_env()" in result.stderr


def test_a_misspelt_variable_is_named_in_a_warning(service: Path) -> None:
    result = _cli(
        service,
        "run",
        "svc_factory:make",
        OUTBOX_CONSUMER_MAX_ATTEMPS="3",
        OUTBOX_CONSUMER_GROUP_ID="g",
    )
    assert result.returncode == 2
    assert "OUTBOX_CONSUMER_MAX_ATTEMPS" in result.stderr
    assert "name no setting" in result.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OUTBOX_CONSUMER_LOG_LEVEL": "LOUD"}, "OUTBOX_CONSUMER_LOG_LEVEL must be one of"),
        ({"OUTBOX_CONSUMER_LOG_JSON": "sometimes"}, "OUTBOX_CONSUMER_LOG_JSON must be true"),
    ],
)
def test_bad_log_settings_exit_2(service: Path, env: dict[str, str], says: str) -> None:
    result = _cli(service, "run", "svc_factory:make", **env)
    assert result.returncode == 2
    assert says in result.stderr


def test_log_settings_from_the_environment(service: Path) -> None:
    result = _cli(
        service,
        "run",
        "svc_factory:make",
        OUTBOX_CONSUMER_LOG_JSON="true",
        OUTBOX_CONSUMER_LOG_LEVEL="debug",
        OUTBOX_CONSUMER_GROUP_ID="g",
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines, result.stderr  # JSON lines, and no warning that the names are unknown
    assert "name no setting" not in result.stderr


def test_help_lists_every_setting_with_its_variable(service: Path) -> None:
    out = _cli(service, "run", "--help").stdout
    for env in ("OUTBOX_CONSUMER_GROUP_ID", "OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE"):
        assert env in out
    assert "--app-dir" in out
