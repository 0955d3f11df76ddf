"""The benchmarks' SQL (the named blocks of bench/sql/*.sql) and their private databases,
created, migrated and dropped by name on a server with the statements of admin.sql."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox_core.migrate import migrate
from outbox_core.queries import parse_blocks

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"


def load_sql(name: str) -> dict[str, str]:
    path = SQL_DIR / name
    return parse_blocks(path.read_text("utf-8"), str(path))


def with_database(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


def admin(url: str, block: str, dbname: str) -> None:
    statement = sql.SQL(load_sql("admin.sql")[block]).format(dbname=sql.Identifier(dbname))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def server_version(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(load_sql("admin.sql")["server_version"]).fetchone()
    return str(row[0]) if row else "unknown"


@contextmanager
def private_database(server: str, prefix: str) -> Iterator[tuple[str, str]]:
    """A database of this run's own on server's cluster, migrated, dropped on the way out:
    its URL and its name (`<prefix>_<random>`)."""
    dbname = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin(server, "bench_database_create", dbname)
    try:
        url = with_database(server, dbname)
        migrate(url)
        yield url, dbname
    finally:
        admin(server, "bench_database_drop", dbname)
