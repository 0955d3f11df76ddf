"""MariaDB without a server: URLs, the codec, binding, the error table, script splitting,
and the parts that refuse MariaDB until they support it."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import MySQLdb
import pymysql
import pytest
import sqlalchemy

from outbox_core.codec import codec_for, for_driver
from outbox_core.database_url import DatabaseUrl, MariadbTarget
from outbox_core.driver_errors import classify
from outbox_core.errors import (
    ConfigurationError,
    DatabaseError,
    MigrationError,
    UniqueViolation,
)
from outbox_core.executors import Statement, bind, sqlalchemy_driver
from outbox_core.migrate import mariadb_statements

CANARY = "pw-canary-5e1f"


@pytest.mark.parametrize(
    "raw",
    [
        "mysql://u:p@db:3307/outbox",
        "mariadb://u:p@db:3307/outbox",
        "mysql+pymysql://u:p@db:3307/outbox",
        "mariadb+pymysql://u:p@db:3307/outbox",
    ],
)
def test_every_scheme_names_mariadb(raw: str) -> None:
    db = DatabaseUrl.parse(raw)
    assert db.dialect == "mariadb"
    assert db.url == "mysql://u:p@db:3307/outbox"
    target = MariadbTarget.parse(db.url)
    assert (target.host, target.port, target.user, target.database) == ("db", 3307, "u", "outbox")


def test_url_parts_are_unquoted_and_defaulted() -> None:
    target = MariadbTarget.parse("mysql://us%40r:p%2Fw%3A@db/")
    assert (target.user, target.password, target.port, target.database) == (
        "us@r",
        "p/w:",
        3306,
        None,
    )
    assert MariadbTarget.parse("mysql://u@/db?unix_socket=/run/m.sock").unix_socket == "/run/m.sock"


@pytest.mark.parametrize(
    "raw",
    [
        f"mysql://u:{CANARY}@db:99999/outbox",
        f"mysql://u:{CANARY}@db:0/outbox",
        f"mysql://u:{CANARY}@db:port/outbox",
        f"mysql://u:{CANARY}@/outbox",
        f"mysql://u:{CANARY}@db/out`box",
        f"mysql://u:{CANARY}@db/{'x' * 65}",
        f"mysql://u:{CANARY}@db/outbox?ssl_ca=/x&init_command=DROP",
        f"mysql://u:{CANARY}@db/outbox?charset=latin1",
        f"mysql://u:{CANARY}@db/outbox#frag",
        f"mysql://u:{CANARY}@db/out box",
        f"mysql://u:{CANARY}@db/outbox\x00",
        f"mysql:/u:{CANARY}@db/outbox",
    ],
)
def test_hostile_urls_are_refused_without_the_password(raw: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        DatabaseUrl.parse(raw)
    assert CANARY not in str(info.value)


def test_the_codec_writes_what_pymysql_renders() -> None:
    codec = codec_for("mariadb")
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert codec.time(when) == dt.datetime(2024, 1, 2, 1, 4, 5, 678901)
    assert codec.time(None) is None
    assert codec.array(["a", 1]) == '["a", 1]'
    assert codec.array(None) is None
    assert codec.ids([1, 2, 3]) == "[1,2,3]"
    assert codec.seconds(1.5) == "1.500000"
    event_id = uuid.uuid4()
    assert codec.uuid(event_id) == str(event_id)


def test_bind_gives_pyformat_and_uuids_as_text() -> None:
    event_id = uuid.uuid4()
    sql, params = bind("pymysql", "mariadb", Statement("setting_get", {"name": event_id}))
    assert "%(name)s" in sql
    assert params == {"name": str(event_id)}
    for driver in ("aiomysql", "mysqldb"):
        assert for_driver(driver, {"ids": [event_id, 1]}) == {"ids": [str(event_id), 1]}
    assert bind("mysqldb", "mariadb", Statement("setting_get", {"name": event_id})) == (
        sql,
        params,
    )
    many = Statement("setting_get", [{"name": "a"}, {"name": "b"}], many=True)
    assert bind("pymysql", "mariadb", many)[1] == [{"name": "a"}, {"name": "b"}]


@pytest.mark.parametrize(
    "url",
    [
        "mysql+pymysql://u:p@db/x",
        "mariadb+pymysql://u:p@db/x",
        "mysql+mysqldb://u:p@db/x",
        "mariadb+mysqldb://u:p@db/x",
        "mysql+aiomysql://u:p@db/x",
    ],
)
def test_sqlalchemy_urls_map_to_mariadb(url: str) -> None:
    engine = sqlalchemy.create_engine(url) if "aiomysql" not in url else None
    if engine is None:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(url).sync_engine
    assert sqlalchemy_driver(engine)[0] == "mariadb"


DUP = "Duplicate entry 'a' for key 'outbox_events_event_id_key'"
# The exception classes of PyMySQL (aiomysql raises them too) and of mysqlclient: one
# table by number serves both.
DRIVER_ERRORS = [pytest.param(pymysql.err, id="pymysql"), pytest.param(MySQLdb, id="mysqldb")]


@pytest.mark.parametrize("errors", DRIVER_ERRORS)
@pytest.mark.parametrize(
    ("name", "args", "kind", "retriable"),
    [
        ("IntegrityError", (1062, DUP), UniqueViolation, False),
        ("OperationalError", (1213, "Deadlock found"), DatabaseError, True),
        ("OperationalError", (1205, "Lock wait timeout"), DatabaseError, True),
        ("OperationalError", (1969, "max_statement_time exceeded"), DatabaseError, True),
        ("OperationalError", (2002, "socket"), DatabaseError, True),
        ("OperationalError", (2003, "Can't connect"), DatabaseError, True),
        ("OperationalError", (2006, "gone away"), DatabaseError, True),
        ("OperationalError", (2013, "Lost connection"), DatabaseError, True),
        (
            "ProgrammingError",
            (1146, "Table 'x.outbox_events' doesn't exist"),
            MigrationError,
            False,
        ),
        ("ProgrammingError", (1064, "syntax"), DatabaseError, False),
        ("InterfaceError", (0, ""), DatabaseError, True),  # closed connection
        ("InterfaceError", (), DatabaseError, True),
        ("OperationalError", (), DatabaseError, False),
        ("OperationalError", ("1213", "a number as text"), DatabaseError, False),
        ("OperationalError", (True, "a bool is no number"), DatabaseError, False),
        ("IntegrityError", (1062,), UniqueViolation, False),
        ("IntegrityError", (1062, None), UniqueViolation, False),
        # mysqlclient's own complaint about a statement's placeholders carries no number.
        ("ProgrammingError", ("not enough arguments for format string",), DatabaseError, False),
    ],
)
def test_the_error_table(
    errors: Any, name: str, args: tuple[Any, ...], kind: type[Exception], retriable: bool
) -> None:
    ours = classify(getattr(errors, name)(*args))
    assert type(ours) is kind
    assert ours.retriable is retriable


@pytest.mark.parametrize("errors", DRIVER_ERRORS)
@pytest.mark.parametrize(
    ("message", "name"),
    [
        (DUP, "outbox_events_event_id_key"),
        ("Duplicate entry '1' for key 'outbox_settings.PRIMARY'", "PRIMARY"),  # MySQL 8
        ("Duplicate entry 'x' for key 'evil' for key 'PRIMARY'", "PRIMARY"),
        ("Duplicate entry 'x' for key ''", None),
        ("no key named here", None),
        (b"bytes", None),
    ],
)
def test_the_duplicate_key_is_named_from_the_error(
    errors: Any, message: Any, name: str | None
) -> None:
    ours = classify(errors.IntegrityError(1062, message))
    assert isinstance(ours, UniqueViolation)
    assert ours.constraint == name
    assert ours.errno == 1062


@pytest.mark.parametrize("errors", DRIVER_ERRORS)
def test_wrapped_by_sqlalchemy(errors: Any) -> None:
    orig = errors.OperationalError(1213, "Deadlock found")
    wrapped = sqlalchemy.exc.OperationalError("UPDATE ...", {}, orig)
    assert classify(wrapped).retriable is True


def test_scripts_split_outside_quotes_and_comments() -> None:
    script = (
        "-- a; comment\nCREATE TABLE t (c text DEFAULT 'a;b''c');\n"
        'INSERT INTO `x;y` VALUES ("q;\\""); /* ; */\n# x;\n'
    )
    assert mariadb_statements(script) == [
        "-- a; comment\nCREATE TABLE t (c text DEFAULT 'a;b''c')",
        'INSERT INTO `x;y` VALUES ("q;\\"")',
    ]
    assert mariadb_statements("-- only a comment\n") == []
    with pytest.raises(MigrationError, match="unterminated"):
        mariadb_statements("SELECT 1; SELECT 2")
