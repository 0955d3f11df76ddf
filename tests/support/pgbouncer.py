"""PgBouncer in transaction pooling mode for the tests: the one PGBOUNCER_URL names
(scripts/services up starts it), or one of a test's own through scripts/service_pgbouncer.py.
Every database name passes through to the server, so a test's private database is reached
through the pooler by the same name."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from scripts.ports import reserved_port
from tests.support.postgres import with_database


@contextlib.contextmanager
def own_pgbouncer(server_url: str, extra: Mapping[str, str] | None = None) -> Iterator[str]:
    """A pgbouncer of this test's own (Debian's package, installed if missing)."""
    from scripts.service_pgbouncer import pgbouncer_start, pgbouncer_stop

    # The postgres user runs it when we are root: the folder must be open to it.
    folder = Path(tempfile.mkdtemp(prefix="outbox-pgbouncer-"))
    folder.chmod(0o755)
    try:
        yield pgbouncer_start(reserved_port(), folder, server_url, extra)
    finally:
        pgbouncer_stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def pgbouncer_url(server_url: str) -> Iterator[str]:
    """PGBOUNCER_URL's pooler when it answers (`scripts/services env` prints the variable
    whether or not `up` started one), else one of our own."""
    from scripts.service_pgbouncer import pgbouncer_ready

    url = os.environ.get("PGBOUNCER_URL")
    if url and pgbouncer_ready(url):
        yield url
        return
    with own_pgbouncer(server_url) as started:
        yield started


def through(pooler_url: str, database_url: str) -> str:
    """database_url's database, reached through the pooler."""
    from urllib.parse import urlsplit

    return with_database(pooler_url, urlsplit(database_url).path.lstrip("/"))
