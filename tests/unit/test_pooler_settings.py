"""The database settings for poolers, timeouts and keepalives: what each connection gets,
how a pooler's refusal is recognised, and typed errors for hostile values."""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
import pytest

from outbox_core.driver_errors import classify
from outbox_core.errors import StartupParameterRefused
from outbox_core.pg_session import SessionSettings
from relay.cli import main as relay_cli
from relay.config import RelaySettings, load_settings
from relay.database import WORK_SETTINGS
from relay.errors import RelayConfigError

URL = "postgresql://u:p@db.example:5432/outbox"


def _settings(**over: object) -> RelaySettings:
    return load_settings(
        database_url=URL,
        kafka_bootstrap_servers="k:9092",
        kafka_security_protocol="PLAINTEXT",
        **over,
    )


def test_the_defaults_bound_every_wait() -> None:
    db = _settings().database
    session = db.session(WORK_SETTINGS)
    assert session.server["statement_timeout"] == "30000"
    assert session.server["lock_timeout"] == "5000"
    kwargs = session.connect_kwargs(URL)
    assert kwargs["keepalives"] == "1"
    assert (kwargs["keepalives_idle"], kwargs["keepalives_interval"]) == ("30", "10")
    assert (kwargs["keepalives_count"], kwargs["tcp_user_timeout"]) == ("3", "30000")
    assert "-c statement_timeout=30000" in kwargs["options"]
    assert "prepare_threshold" not in kwargs  # prepared statements stay on direct


def test_the_environment_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_POOLER", "transaction")
    monkeypatch.setenv("OUTBOX_DATABASE_LOCK_TIMEOUT_S", "0.25")
    db = _settings().database
    assert db.database_pooler == "transaction"
    assert db.session({}).server["lock_timeout"] == "250"


def test_behind_a_transaction_pooler_the_settings_travel_per_transaction() -> None:
    session = _settings(database_pooler="transaction").database.session(WORK_SETTINGS)
    kwargs = session.connect_kwargs(URL)
    assert "options" not in kwargs
    assert kwargs["prepare_threshold"] is None
    assert session.per_transaction
    local = session.local_settings()
    assert local.query == "session_settings_local"
    params = local.params
    assert isinstance(params, Mapping)
    assert dict(zip(params["names"], params["values"], strict=True)) == {
        **WORK_SETTINGS,
        "statement_timeout": "30000",
        "lock_timeout": "5000",
    }


def test_the_url_s_own_connection_parameters_win() -> None:
    url = f"{URL}?keepalives_idle=7&options=-c%20search_path%3Dbilling"
    kwargs = _settings().database.session(WORK_SETTINGS).connect_kwargs(url)
    assert "keepalives_idle" not in kwargs  # libpq takes the URL's
    assert kwargs["options"].endswith("-c search_path=billing")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("database_pooler", "pgbouncer"),
        ("database_pooler", ""),
        ("database_statement_timeout_s", "0"),
        ("database_statement_timeout_s", "-1"),
        ("database_statement_timeout_s", "nan"),
        ("database_statement_timeout_s", "inf"),
        ("database_statement_timeout_s", "1e12"),
        ("database_statement_timeout_s", "0.0001"),  # 0 ms: no timeout at all
        ("database_lock_timeout_s", "0"),
        ("database_side_statement_timeout_s", "0"),
        ("database_side_statement_timeout_s", "nan"),
        ("database_side_statement_timeout_s", "-5"),
        ("database_lock_timeout_s", "nan"),
        ("database_keepalives_idle_s", "0"),
        ("database_keepalives_idle_s", "1.5"),
        ("database_keepalives_interval_s", "100000"),
        ("database_keepalives_count", "0"),
        ("database_keepalives_count", "1000"),
        ("database_tcp_user_timeout_s", "-1"),
        ("database_tcp_user_timeout_s", "inf"),
    ],
)
def test_hostile_values_are_refused_at_load(name: str, value: str) -> None:
    with pytest.raises(RelayConfigError, match=f"OUTBOX_{name.upper()}"):
        _settings(**{name: value})


def test_a_lock_timeout_beyond_the_statement_timeout_is_refused() -> None:
    with pytest.raises(RelayConfigError, match="must not exceed database_statement_timeout_s"):
        _settings(database_statement_timeout_s=2, database_lock_timeout_s=3)


def test_a_side_loop_timeout_beyond_the_statement_timeout_is_refused() -> None:
    with pytest.raises(RelayConfigError, match="must not exceed database_statement_timeout_s"):
        _settings(database_statement_timeout_s=2, database_side_statement_timeout_s=3)


@pytest.mark.parametrize(
    ("statement", "side", "expected"),
    [(30, None, 10), (6, None, 6), (30, 20, 20), (30, 0.5, 0.5)],
)
def test_side_loops_get_their_own_statement_timeout(
    statement: float, side: float | None, expected: float
) -> None:
    over = {} if side is None else {"database_side_statement_timeout_s": side}
    db = _settings(database_statement_timeout_s=statement, **over).database
    assert db.statement_timeout_s(side=True) == expected
    assert db.statement_timeout_s(side=False) == statement
    sent = db.session({}, side=True).server["statement_timeout"]
    assert sent == str(round(expected * 1000))


@pytest.mark.parametrize(
    ("text", "parameter"),
    [
        ("connection failed: ... FATAL:  unsupported startup parameter: options", "options"),
        (
            "FATAL:  unsupported startup parameter in options: statement_timeout",
            "statement_timeout",
        ),
        ("FATAL:  unsupported options startup parameter: only '-c config=val' ...", None),
    ],
)
def test_a_pooler_s_refusal_becomes_a_typed_error(text: str, parameter: str | None) -> None:
    error = classify(psycopg.OperationalError(text))
    assert isinstance(error, StartupParameterRefused)
    assert error.parameter == parameter
    assert not error.retriable
    assert "PgBouncer" in str(error)


def test_a_lost_connection_is_still_only_retriable() -> None:
    error = classify(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not isinstance(error, StartupParameterRefused)
    assert error.retriable


def test_settings_dropped_only_when_none_is_in_force() -> None:
    session = SessionSettings(server={"jit": "off", "statement_timeout": "30000"})
    assert session.dropped([("jit", "on"), ("statement_timeout", "0")])
    assert not session.dropped([("jit", "on"), ("statement_timeout", "30000")])  # user's jit
    assert not SessionSettings().dropped([])


def test_the_operator_commands_refuse_a_hostile_pooler(capsys: pytest.CaptureFixture[str]) -> None:
    assert relay_cli(["status", "--database-url", "sqlite:///x.db", "--database-pooler", "x"]) == 2
    assert "database_pooler must be one of none, transaction" in capsys.readouterr().err
