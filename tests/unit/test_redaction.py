"""outbox_core.logs keeps secrets out of every line, in whatever spelling a formatter gives them."""

from __future__ import annotations

import json
import logging
import sys
import uuid

import pytest

from outbox_core import logs
from relay import cli


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("relay", logging.WARNING, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return record


def _core() -> str:
    return f"cnry{uuid.uuid4().hex[:12]}"


def test_json_lines_never_carry_a_password_that_json_escapes() -> None:
    core = _core()
    password = f'{core}"\\x'  # a quote and a backslash: json.dumps escapes both
    logs.add_secrets(logs.url_secrets(f"postgresql://relay:{password}@db/outbox"))
    line = logs.JsonFormatter().format(
        _record("connect failed", error=f"bad password {password!s}", attempt=1)
    )
    doc = json.loads(line)
    assert core not in line
    assert doc["error"] == "bad password ***"


def test_text_fields_never_carry_a_password_in_a_list_or_url_encoded() -> None:
    core = _core()
    password = f"{core}@'\"%"  # in the URL percent-encoded; a list shows it through repr()
    url = f"postgresql://relay:{core}%40%27%22%25@db/outbox"
    logs.add_secrets(logs.url_secrets(url))
    line = logs.TextFormatter().format(
        _record("retrying", tried=[password], dsn=url, plain=f"password={password}")
    )
    assert core not in line, line


def test_a_url_password_is_redacted_even_when_unknown() -> None:
    core = _core()
    assert core not in logs.redact(f"cannot reach postgresql://relay:{core}@db:5432/outbox")
    assert core not in logs.redact(f"dsn: host=db user=relay password={core} dbname=x")


def test_usage_errors_do_not_echo_a_url_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    core = _core()
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main() installs its own
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--databse-url", f"postgresql://relay:{core}@db/outbox"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --databse-url postgresql://relay:***@db/outbox" in err
    assert core not in err


@pytest.mark.parametrize(
    "secret",
    ["p@ss", "@lead", "trail@", "a@b@c", "p/w@x", "pw?x@y"],
)
@pytest.mark.parametrize("scheme", ["postgresql", "mysql", "redis"])
def test_a_url_password_with_a_raw_at_sign_is_hidden_whole(scheme: str, secret: str) -> None:
    line = f"cannot reach {scheme}://relay:{secret}@db.internal:5432/outbox?x=a@b now"
    shown = logs.redact(line)
    parts = [p for p in secret.split("@") if len(p) > 1]
    assert all(part not in shown for part in parts), shown
    assert shown.startswith(f"cannot reach {scheme}://relay:***@db.internal:5432/outbox")
