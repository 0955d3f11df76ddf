"""The operator commands as an operator runs them (`python -m relay.cli parked|replay` as a
process, on a terminal or not), on Postgres and SQLite: they change exactly the rows they
listed, --all reaches every matching row, discard and replay ask first (or need --yes),
--dry-run changes nothing, limits are checked, and outbox strings never drive the
terminal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from relay.config import load_settings
from tests.support.db import Backend, postgres_backend
from tests.support.ops import cli, cli_on_terminal, output, park, publish, rows
from tests.support.stores import emit, event

pytestmark = pytest.mark.integration


def _db(backend: Backend) -> dict[str, str]:
    return {"OUTBOX_DATABASE_URL": backend.url}


async def test_discard_deletes_exactly_the_rows_it_listed_not_those_parked_meanwhile(
    backend: Backend,
) -> None:
    """Between the listing the operator confirms and the delete, another row starts to
    match the filter: it is left alone."""
    a, b, late = emit(backend, event("k-1"), event("k-2"), event("k-3"))
    park(backend, [a, b], "RecordTooLarge: 2000 bytes")
    env = _db(backend)

    def park_another() -> None:
        park(backend, [late], "RecordTooLarge: 3000 bytes")

    done = await asyncio.to_thread(
        cli_on_terminal,
        "parked",
        "discard",
        "--error",
        "RecordTooLarge",
        env=env,
        answer="y\n",
        before_answer=park_another,
    )
    assert done.returncode == 0, output(done)
    assert f"discarded 2 row(s): {a}, {b}" in done.stdout
    assert {i: r.status for i, r in rows(backend).items()} == {late: "parked"}


async def test_parked_retry_all_reaches_every_matching_row_past_the_default_limit(
    backend: Backend,
) -> None:
    ids = emit(backend, *(event(f"k-{i}") for i in range(1_200)))
    park(backend, ids, "KafkaTimeoutError")
    done = await asyncio.to_thread(cli, "parked", "retry", "--all", "--json", env=_db(backend))
    assert done.returncode == 0, output(done)
    assert len(json.loads(done.stdout)["ids"]) == 1_200
    assert {r.status for r in rows(backend).values()} == {"pending"}


async def test_discard_and_replay_without_a_terminal_need_yes_and_dry_run_changes_nothing(
    backend: Backend,
) -> None:
    parked, kept = emit(backend, event("k-1"), event("k-2"))
    park(backend, [parked], "RecordTooLarge")
    publish(backend, [kept])
    env = _db(backend)
    since = "2000-01-01T00:00:00+00:00"
    before = rows(backend)

    refused = [
        await asyncio.to_thread(cli, *args, env=env)
        for args in (
            ("parked", "discard", "--all"),
            ("replay", "--since", since),
        )
    ]
    for done in refused:
        assert done.returncode == 2, output(done)
        assert "no terminal to ask on: pass --yes" in done.stderr, output(done)
    dry = [
        await asyncio.to_thread(cli, *args, env=env)
        for args in (
            ("parked", "discard", "--all", "--dry-run", "--json"),
            ("replay", "--since", since, "--dry-run", "--json"),
        )
    ]
    for done, row_id in zip(dry, (parked, kept), strict=True):
        assert done.returncode == 0, output(done)
        assert json.loads(done.stdout)["would"] == [row_id]
    assert rows(backend) == before

    discarded = await asyncio.to_thread(cli, "parked", "discard", "--all", "--yes", env=env)
    replayed = await asyncio.to_thread(cli, "replay", "--since", since, "--yes", env=env)
    assert discarded.returncode == 0, output(discarded)
    assert replayed.returncode == 0, output(replayed)
    after = rows(backend)
    assert parked not in after
    assert (after[kept].status, after[kept].published) == ("pending", False)


async def test_replay_on_a_terminal_asks_and_a_no_changes_nothing(backend: Backend) -> None:
    [kept] = emit(backend, event("k-1"))
    publish(backend, [kept])
    done = await asyncio.to_thread(
        cli_on_terminal, "replay", "--id", str(kept), env=_db(backend), answer="n\n"
    )
    assert done.returncode == 4, output(done)
    assert "replay 1 row(s)" in done.stdout
    assert rows(backend)[kept].published


def test_limits_are_checked_before_touching_the_database() -> None:
    # Nothing listens there: an attempt to connect would exit 1, not 2.
    env = {"OUTBOX_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    for args in (
        ("parked", "list", "--limit", "0"),
        ("parked", "retry", "--all", "--limit", "-5"),
        ("parked", "discard", "--key", "k", "--limit", "10000001"),
        ("replay", "--since", "2024-01-01T00:00:00Z", "--limit", "0"),
        ("replay", "--since", "2024-01-01T00:00:00Z", "--limit", "many"),
        ("parked", "retry", "--id", "99999999999999999999"),
    ):
        done = cli(*args, env=env)
        assert done.returncode == 2, f"{args}: {output(done)}"
        assert "Traceback" not in done.stderr, f"{args}: {output(done)}"


async def test_strings_from_the_outbox_are_printed_with_escape_sequences_neutralised(
    backend: Backend,
) -> None:
    """A key or an error text holding terminal escape sequences (set the title, clear the
    screen, a bidi override) is shown escaped, never sent to the terminal as such."""
    hostile_key = "k\x1b]0;owned\x07"
    [row] = emit(backend, event(hostile_key))
    park(backend, [row], "boom\x1b[2J\x1b[31m red \u202e")
    done = await asyncio.to_thread(cli, "parked", "list", env=_db(backend))
    assert done.returncode == 0, output(done)
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in done.stdout
    assert "k\\x1b]0;owned\\x07" in done.stdout
    assert "boom\\x1b[2J" in done.stdout


def test_a_password_given_as_a_flag_gets_a_warning_and_the_environment_none(pg_url: str) -> None:
    """--database-url with a password is visible to every local user (ps): the command
    still runs, and says so; the same URL from the environment gets no warning."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    password = urlsplit(pg_url).password
    assert password, "the test database URL has a password"
    flagged = cli("status", "--database-url", pg_url)
    from_env = cli("status", env=_db(backend))
    assert flagged.returncode == 0, output(flagged)
    assert "warning: --database-url puts a secret on the command line" in flagged.stderr
    assert "OUTBOX_DATABASE_URL" in flagged.stderr
    assert password not in flagged.stderr
    assert from_env.returncode == 0, output(from_env)
    assert "warning" not in from_env.stderr
    run = cli("run", "--kafka-sasl-password", "flagged-secret-value", env=_db(backend))
    assert "warning: --kafka-sasl-password puts a secret on the command line" in run.stderr
    assert "OUTBOX_KAFKA_SASL_PASSWORD_FILE" in run.stderr
    assert "flagged-secret-value" not in run.stderr


def test_the_database_url_can_come_from_a_file(pg_url: str, tmp_path: Path) -> None:
    """OUTBOX_DATABASE_URL_FILE (a mounted secret) serves the operator commands and `run`'s
    settings alike; a file that cannot be read is a configuration error, exit 2."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    secret = tmp_path / "database-url"
    secret.write_text(pg_url + "\n")
    done = cli("status", "--json", env={"OUTBOX_DATABASE_URL_FILE": str(secret)})
    assert done.returncode == 0, output(done)
    assert json.loads(done.stdout)["shard_count"] == 16
    missing = cli("status", env={"OUTBOX_DATABASE_URL_FILE": str(tmp_path / "nope")})
    assert missing.returncode == 2, output(missing)
    assert "cannot read the database URL file" in missing.stderr
    settings = load_settings(
        database_url_file=str(secret),
        kafka_bootstrap_servers="127.0.0.1:9092",
        kafka_security_protocol="PLAINTEXT",
    )
    assert settings.database.database_url.get_secret_value() == pg_url
