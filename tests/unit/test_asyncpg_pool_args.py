"""What the relay's asyncpg connections take from a libpq-style URL: asyncpg reads none
of libpq's connection parameters, and sends any query parameter it does not know to the
server as a setting, which the server refuses."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from outbox_core.asyncpg_pool import connect_args
from outbox_core.errors import ConfigurationError
from outbox_core.pg_session import SessionSettings

OURS = SessionSettings(
    server={"statement_timeout": "30000", "jit": "off"},
    libpq={"keepalives": "1", "keepalives_idle": "30", "tcp_user_timeout": "9000"},
)
BASE = "postgresql://u:p@127.0.0.1:5432/db"


@pytest.fixture(autouse=True)
def no_pg_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    monkeypatch.delenv("PGAPPNAME", raising=False)


def test_libpq_only_parameters_leave_the_url_and_asyncpgs_own_stay() -> None:
    url = (
        f"{BASE}?sslmode=disable&keepalives_idle=5&tcp_user_timeout=100&connect_timeout=3"
        "&application_name=shop&options=-c%20search_path%3Dapp"
    )
    dsn, server, sockopts = connect_args(url, OURS)
    assert dsn == f"{BASE}?sslmode=disable&application_name=shop"
    assert server == {"statement_timeout": "30000", "jit": "off", "search_path": "app"}
    # The URL's own socket options win over ours, as with libpq.
    assert sockopts == {"keepalives": "1", "keepalives_idle": "5", "tcp_user_timeout": "100"}


def test_a_setting_the_user_gives_in_options_wins_over_ours() -> None:
    url = f"{BASE}?options=-cstatement_timeout%3D5s%20--jit%3Don"
    _, server, _ = connect_args(url, OURS)
    assert server == {"statement_timeout": "5s", "jit": "on"}


def test_pgoptions_and_pgappname_count_when_the_url_gives_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c search_path=app")
    monkeypatch.setenv("PGAPPNAME", "relay-a")
    _, server, _ = connect_args(BASE, OURS)
    assert server["search_path"] == "app"
    assert server["application_name"] == "relay-a"
    _, server, _ = connect_args(f"{BASE}?application_name=mine", OURS)
    assert "application_name" not in server  # the URL's travels in the URL


def test_behind_a_transaction_pooler_no_setting_goes_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGAPPNAME", "relay-a")
    behind = SessionSettings(server=OURS.server, libpq=OURS.libpq, pooler="transaction")
    _, server, _ = connect_args(f"{BASE}?options=-c%20jit%3Doff", behind)
    assert server == {"application_name": "relay-a"}  # a pooler takes this one


@pytest.mark.parametrize(
    "options", ["-c search_path='app", '-c "x=1'], ids=["single-quote", "double-quote"]
)
def test_options_that_cannot_be_read_are_refused_clearly(options: str) -> None:
    with pytest.raises(ConfigurationError, match=r"options .* cannot be read"):
        connect_args(f"{BASE}?options={quote(options)}", OURS)
