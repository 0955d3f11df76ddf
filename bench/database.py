"""The benchmarks' SQL (the named blocks of bench/sql/*.sql) and their private databases,
created and dropped by name on DATABASE_URL's server with the statements of admin.sql."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox_core.queries import parse_blocks

SQL_DIR = Path(__file__).resolve().parent / "sql"


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
