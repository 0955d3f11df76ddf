"""How values travel to each dialect's parameters: one codec per dialect.

Postgres (psycopg) takes Python values as they are: arrays as lists, times as aware
datetimes, UUIDs, floats. SQLite has no arrays, no time type and builds its time modifiers
from text, so there lists are JSON (read with json_each), times ISO-8601 UTC text with
milliseconds and a Z, and seconds decimal text. Every caller encodes through one of these
instead of branching on the dialect.

MariaDB (PyMySQL, aiomysql, mysqlclient) has no arrays either: lists are JSON, read with
JSON_TABLE; its DATETIME(6) columns hold UTC without a zone (sessions run at time_zone
'+00:00'), so times travel as naive UTC datetimes, which the drivers render with their
microseconds (an aware one would be rendered in its own zone, the offset dropped); UUIDs
are CHAR(36) text; seconds are decimal text, exact to the microsecond in INTERVAL
arithmetic. Booleans are TINYINT(1): the drivers send True as 1 and read back 1, so
callers compare with bool(). The three render every parameter into the statement on the
client alike: bytes escaped (a BLOB takes any byte), None as NULL, JSON text quoted.

Below the dialect, each Postgres driver binds those values its own way, and the executor
of a connection hands them over through `for_driver` as it binds a statement: psycopg 3
and asyncpg take UUIDs, lists, datetimes and floats natively (asyncpg by the type the
server infers for each `$n`, which the statements spell out with casts); psycopg2 renders
parameters as SQL literals on the client and has no adapter for uuid.UUID unless one is
registered globally, so UUIDs travel to it as text, cast by the statement.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from outbox_core.database_url import Dialect

# The DBAPI under a connection: how statements are bound, and its exceptions.
Driver = Literal["psycopg", "psycopg2", "asyncpg", "sqlite3", "pymysql", "aiomysql", "mysqldb"]


class Codec(Protocol):
    dialect: Dialect

    def array(self, values: Sequence[Any] | None) -> Any:
        """A list parameter (ids, errors, flags); None stays None (an optional filter)."""
        ...

    def ids(self, values: Sequence[int]) -> Any:
        """A list of integer ids, the statement casting it to bigint[] (or reading it with
        json_each): thousands per call, so encoded in one C-level join."""
        ...

    def time(self, value: dt.datetime | None) -> Any: ...

    def seconds(self, value: float) -> Any: ...

    def uuid(self, value: uuid.UUID) -> Any: ...


class PostgresCodec:
    dialect: Dialect = "postgres"

    def array(self, values: Sequence[Any] | None) -> Any:
        return None if values is None else list(values)

    def ids(self, values: Sequence[int]) -> Any:
        # An array literal, sent as text and cast by the statement: psycopg's list dumper
        # walks the list in Python (a tenth of a drain's relay CPU for 8,000 ids a claim
        # and a settle); str.join does it in C.
        return IdArrayText(values)

    def time(self, value: dt.datetime | None) -> Any:
        return value

    def seconds(self, value: float) -> Any:
        return value

    def uuid(self, value: uuid.UUID) -> Any:
        return value


class SqliteCodec:
    dialect: Dialect = "sqlite"

    def array(self, values: Sequence[Any] | None) -> Any:
        return None if values is None else json.dumps(list(values))

    def ids(self, values: Sequence[int]) -> Any:
        return json.dumps(list(values))

    def time(self, value: dt.datetime | None) -> Any:
        if value is None:
            return None
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def seconds(self, value: float) -> Any:
        return f"{value:.6f}"

    def uuid(self, value: uuid.UUID) -> Any:
        return str(value)


class MariadbCodec:
    dialect: Dialect = "mariadb"

    def array(self, values: Sequence[Any] | None) -> Any:
        return None if values is None else json.dumps(list(values), default=str)

    def ids(self, values: Sequence[int]) -> Any:
        return "[" + ",".join(map(str, values)) + "]"

    def time(self, value: dt.datetime | None) -> Any:
        if value is None:
            return None
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def seconds(self, value: float) -> Any:
        return f"{value:.6f}"

    def uuid(self, value: uuid.UUID) -> Any:
        return str(value)


_CODECS: dict[Dialect, Codec] = {
    "postgres": PostgresCodec(),
    "sqlite": SqliteCodec(),
    "mariadb": MariadbCodec(),
}


def codec_for(dialect: Dialect) -> Codec:
    return _CODECS[dialect]


class IdArrayText(str):
    """Integer ids as a Postgres array literal, `{1,2,3}`, keeping the ids themselves:
    asyncpg binds a parameter by the type the server infers for it (bigint[] from the
    statement's cast) and takes the list, encoded in Cython; psycopg takes the text."""

    values: Sequence[int]

    def __new__(cls, values: Sequence[int]) -> IdArrayText:
        text = super().__new__(cls, "{" + ",".join(map(str, values)) + "}")
        text.values = values
        return text


def _uuid_as_text(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list) and any(isinstance(v, uuid.UUID) for v in value):
        return [str(v) if isinstance(v, uuid.UUID) else v for v in value]
    return value


# Drivers with no adapter for uuid.UUID: psycopg2 (unless registered globally), PyMySQL
# (aiomysql is PyMySQL's converters) and mysqlclient, which render an unknown type through
# str() at best, a broken literal at worst: the text is given, not left to a fallback.
_UUIDS_AS_TEXT: frozenset[Driver] = frozenset({"psycopg2", "pymysql", "aiomysql", "mysqldb"})


def for_driver(driver: Driver, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A statement's parameters (encoded by the dialect's codec) as the driver binds them."""
    if driver in _UUIDS_AS_TEXT:
        return {name: _uuid_as_text(value) for name, value in params.items()}
    if driver == "asyncpg":
        return {
            name: value.values if isinstance(value, IdArrayText) else value
            for name, value in params.items()
        }
    return params
