"""The registry of named SQL blocks, loaded from outbox_core/sql/<dialect>/*.sql.

Each file holds the queries of one table; a block starts with `-- name: <noun_verb>`.
No SQL lives in Python code. Postgres blocks use pyformat placeholders (`%(name)s`, `%%` for
a percent sign), which psycopg and psycopg2 take as they are; asyncpg takes `$1, $2, ...`
and a tuple, which `numbered` derives from the same block.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from outbox_core.database_url import DIALECTS, Dialect

__all__ = ["DIALECTS", "Dialect", "NumberedQuery", "numbered", "parse_blocks", "queries", "query"]

_NAME = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_PYFORMAT = re.compile(r"%\((\w+)\)s|%%|%")


def parse_blocks(text: str, source: str = "<sql>") -> dict[str, str]:
    """Split a .sql file into {name: statement}; comments before a block stay with it."""
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement = body.strip().rstrip(";").strip()
        if name in blocks:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        if not statement:
            raise ValueError(f"{source}: query {name!r} is empty")
        blocks[name] = statement
    return blocks


@functools.cache
def queries(dialect: Dialect) -> dict[str, str]:
    """All named queries of one dialect, from every table's file."""
    found: dict[str, str] = {}
    folder = resources.files("outbox_core") / "sql" / dialect
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, statement in parse_blocks(entry.read_text("utf-8"), entry.name).items():
            if name in found:
                raise ValueError(f"{dialect}/{entry.name}: query {name!r} is defined twice")
            found[name] = statement
    return found


def query(dialect: Dialect, name: str) -> str:
    try:
        return queries(dialect)[name]
    except KeyError:
        raise KeyError(f"no query {name!r} for {dialect}") from None


@dataclass(frozen=True)
class NumberedQuery:
    """A block with `$n` placeholders; names[i] is the parameter that binds to $(i+1)."""

    sql: str
    names: tuple[str, ...]


def to_numbered(sql: str) -> NumberedQuery:
    """`%(name)s` -> `$n` (one number per distinct name, in order of first use), `%%` -> `%`."""
    names: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) == "%":
                raise ValueError(f"a lone % in a pyformat statement: {sql[:60]!r}")
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return NumberedQuery(_PYFORMAT.sub(replace, sql), tuple(names))


@functools.cache
def numbered(dialect: Dialect, name: str) -> NumberedQuery:
    """query(dialect, name) with numbered placeholders, for drivers that take no names."""
    return to_numbered(query(dialect, name))
