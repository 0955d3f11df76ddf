"""Running named SQL statements: one interface, with sync and async twins.

A Statement names a query of the registry (outbox_core/sql) and carries its parameters;
an executor runs it on one kind of connection and returns the rows. A Plan is a generator
that yields Statements, receives each one's rows and returns a result, so one piece of
logic serves sync and async code and every dialect. Every driver exception leaves an
executor as an OutboxError (driver_errors.classify): this is the only place they meet.

`bind` is where a statement meets its driver: the block's placeholders in the driver's
style (asyncpg: `$n` and a tuple) and the values as the driver adapts them
(codec.for_driver). Supported underneath: psycopg 3, psycopg2, asyncpg, sqlite3, PyMySQL,
mysqlclient and aiomysql (MariaDB), raw or through SQLAlchemy; and Django's Postgres
connection (either psycopg).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from outbox_core.codec import Driver, for_driver
from outbox_core.database_url import Dialect
from outbox_core.driver_errors import classify
from outbox_core.errors import OutboxError, UnsupportedConnection
from outbox_core.queries import numbered, query

Rows = list[tuple[Any, ...]]
Params = Mapping[str, Any]


class NamedRows(list[tuple[Any, ...]]):
    """Rows with their result's column names, for a Statement(named=True): the caller maps
    names to positions once per statement, not once per row. `later`: for a
    Statement(sets=True), the result sets after this one, in order."""

    def __init__(self, rows: Rows, columns: Sequence[str], later: Sequence[NamedRows] = ()) -> None:
        super().__init__(rows)
        self.columns = tuple(columns)
        self.later = list(later)


def _result(statement: Statement, rows: Rows, columns: Any) -> Rows:
    """columns: a DB-API cursor.description (the names first in each entry)."""
    return NamedRows(rows, [c[0] for c in columns]) if statement.named else rows


@dataclass(frozen=True)
class Statement:
    """One named query and its parameters; `many` runs it once per parameter set.
    `together` (MariaDB, aiomysql): once per parameter set too, the statements sent in one
    round trip (a multi-statement, which aiomysql's connections always accept), each still
    a statement of its own; the rows of all of them, in order. A block of several
    statements (a script) runs this way, even with one parameter set: every result set
    is read.
    `union` (MariaDB, aiomysql): once per parameter set too, each rendering a part of one
    statement, `(part) UNION ALL (part) ...` (union_of): one read view, one plan, one
    result set, the parts' rows in the parts' order.
    `sets` (MariaDB, aiomysql): a block of several statements whose result sets differ,
    run once: the first result set as NamedRows, the others in its `later`.
    `commit` (MariaDB, aiomysql): the last statement of a plan that writes, its
    transaction's COMMIT sent with it (AiomysqlExecutor); elsewhere the plan commits when
    it returns, as always.
    `binary`: rows come back in Postgres's binary format (bytea as raw bytes instead of
    hex text: half the bytes and no decoding, for large reads); other drivers ignore it.
    `named`: rows come back as NamedRows, with the result's column names."""

    query: str
    params: Params | Sequence[Params] = field(default_factory=dict)
    many: bool = False
    binary: bool = False
    named: bool = False
    together: bool = False
    union: bool = False
    sets: bool = False
    commit: bool = False


Plan = Generator[Statement, Rows, Any]


class SyncExecutor(Protocol):
    dialect: Dialect

    def run(self, statement: Statement) -> Rows: ...


class AsyncExecutor(Protocol):
    dialect: Dialect

    async def run(self, statement: Statement) -> Rows: ...


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Driver exceptions raised inside become ours (classify); ours pass unchanged."""
    try:
        yield
    except OutboxError:
        raise
    except Exception as exc:
        raise classify(exc) from exc


def run_plan(plan: Plan, executor: SyncExecutor) -> Any:
    try:
        statement = next(plan)
        while True:
            statement = plan.send(executor.run(statement))
    except StopIteration as done:
        return done.value


async def run_plan_async(plan: Plan, executor: AsyncExecutor) -> Any:
    try:
        statement = next(plan)
        while True:
            statement = plan.send(await executor.run(statement))
    except StopIteration as done:
        return done.value


def _one(statement: Statement) -> Params:
    assert isinstance(statement.params, Mapping), statement.query
    return statement.params


def _many(statement: Statement) -> list[Params]:
    assert not isinstance(statement.params, Mapping), statement.query
    return list(statement.params)


def bind(driver: Driver, dialect: Dialect, statement: Statement) -> tuple[str, Any]:
    """The statement's SQL and parameters in the driver's style: for asyncpg `$n`
    placeholders and a tuple (a list of them with `many`), else the named block and a
    mapping (a list of them)."""
    if driver == "asyncpg":
        numbered_query = numbered(dialect, statement.query)
        names = numbered_query.names
        if statement.many:
            many = [for_driver(driver, p) for p in _many(statement)]
            return numbered_query.sql, [tuple(p[n] for n in names) for p in many]
        params = for_driver(driver, _one(statement))
        return numbered_query.sql, tuple(params[n] for n in names)
    sql = query(dialect, statement.query)
    if statement.together or statement.union:
        return sql, [for_driver(driver, p) for p in _many(statement)]
    if statement.many:
        if dialect == "mariadb":
            sql = _from_the_first_keyword(sql)
        return sql, [for_driver(driver, p) for p in _many(statement)]
    return sql, for_driver(driver, _one(statement))


def _from_the_first_keyword(sql: str) -> str:
    """The statement without the block's leading comment lines. PyMySQL, aiomysql and
    mysqlclient send an executemany of `INSERT ... VALUES (...)` as one multi-row INSERT
    only when the text starts with INSERT; behind a comment, each row went as a statement
    of its own."""
    lines = sql.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        del lines[0]
    return "\n".join(lines)


def binary_byte_arrays(sql: str, params: Params) -> str:
    """psycopg 3: a list of bytes (a batch's payloads) bound in binary (`%(name)b`).

    psycopg sends a list in text format, where every bytea element is hex: twice its size
    on the wire, parsed back by the server's array_in and hex_decode, about 50 ms a
    megabyte (bench/emit_large.py). The first element decides, so the relay's lists of
    thousands of ids are never walked.
    """
    for name, value in params.items():
        if type(value) is list and value and isinstance(value[0], bytes):
            sql = sql.replace(f"%({name})s", f"%({name})b")
    return sql


class SqliteExecutor:
    """On an sqlite3.Connection (the caller's, or one the relay owns)."""

    dialect: Dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def run(self, statement: Statement) -> Rows:
        sql = query(self.dialect, statement.query)
        with translated():
            if statement.many:
                self.conn.executemany(sql, _many(statement))
                return []
            cursor = self.conn.execute(sql, _one(statement))
            if not cursor.description:
                return []
            return _result(statement, [tuple(r) for r in cursor.fetchall()], cursor.description)


class PsycopgExecutor:
    """On a psycopg 3 Connection."""

    dialect: Dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, statement: Statement) -> Rows:
        sql = query(self.dialect, statement.query)
        with translated(), self.conn.cursor() as cur:
            if statement.many:
                cur.executemany(sql, _many(statement))
                return []
            params = _one(statement)
            cur.execute(binary_byte_arrays(sql, params), params, binary=statement.binary)
            return _result(statement, cur.fetchall(), cur.description) if cur.description else []


class AsyncPsycopgExecutor:
    """On a psycopg 3 AsyncConnection."""

    dialect: Dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def run(self, statement: Statement) -> Rows:
        sql = query(self.dialect, statement.query)
        with translated():
            async with self.conn.cursor() as cur:
                if statement.many:
                    await cur.executemany(sql, _many(statement))
                    return []
                params = _one(statement)
                await cur.execute(binary_byte_arrays(sql, params), params, binary=statement.binary)
                if not cur.description:
                    return []
                return _result(statement, await cur.fetchall(), cur.description)


class Psycopg2Executor:
    """On a psycopg2 connection (raw, or Django's underneath)."""

    dialect: Dialect = "postgres"
    driver: Driver = "psycopg2"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, statement: Statement) -> Rows:
        sql, params = bind(self.driver, self.dialect, statement)
        with translated(), self.conn.cursor() as cur:
            if statement.many:
                cur.executemany(sql, params)
                return []
            cur.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []


class AsyncpgExecutor:
    """On an asyncpg Connection."""

    dialect: Dialect = "postgres"
    driver: Driver = "asyncpg"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def run(self, statement: Statement) -> Rows:
        sql, args = bind(self.driver, self.dialect, statement)
        with translated():
            if statement.many:
                await self.conn.executemany(sql, args)
                return []
            records = await self.conn.fetch(sql, *args)
            rows = [tuple(r) for r in records]
            if not statement.named:
                return rows
            columns = _ASYNCPG_COLUMNS.get(sql)
            if columns is None:
                if records:
                    columns = tuple(records[0].keys())
                else:  # no row to read the names from: the statement's description
                    prepared = await self.conn.prepare(sql)
                    columns = tuple(a.name for a in prepared.get_attributes())
                _ASYNCPG_COLUMNS[sql] = columns
            return NamedRows(rows, columns)


# A statement's result columns, by its SQL: asyncpg gives them with each row, and an
# empty result has none to give them with.
_ASYNCPG_COLUMNS: dict[str, tuple[str, ...]] = {}


class PyMysqlExecutor:
    """On a PyMySQL connection (MariaDB); MysqldbExecutor, mysqlclient's, is this with the
    driver's own cursor class. Rows are tuples whatever cursor class the connection was
    given (a DictCursor's dicts would lose their order)."""

    dialect: Dialect = "mariadb"
    driver: Driver = "pymysql"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _tuple_cursor(self) -> Any:
        from pymysql.cursors import Cursor

        return Cursor

    def run(self, statement: Statement) -> Rows:
        sql, params = bind(self.driver, self.dialect, statement)
        with translated(), self.conn.cursor(self._tuple_cursor()) as cur:
            if statement.many:
                cur.executemany(sql, params)
                return []
            cur.execute(sql, params)
            if not cur.description:
                return []
            return _result(statement, list(cur.fetchall()), cur.description)


class MysqldbExecutor(PyMysqlExecutor):
    """On a mysqlclient (MySQLdb) connection. Its DB-API is PyMySQL's where the executor
    touches it: pyformat parameters rendered into the statement on the client, the same
    literals for every value the codec gives, `executemany` and `description` alike."""

    driver: Driver = "mysqldb"

    def _tuple_cursor(self) -> Any:
        from MySQLdb.cursors import Cursor

        return Cursor


class AiomysqlExecutor:
    """On an aiomysql connection (MariaDB), with tuple rows as PyMysqlExecutor.

    begin: the connection has no transaction open and the plan's statements are to run in
    one (outbox_core/mariadb_pool.py): its first statement is sent behind
    `transaction_begin` in the same round trip, and a statement marked `commit` is
    followed by `transaction_commit` (database.sql), so a fence and its writes take two
    round trips, not four."""

    dialect: Dialect = "mariadb"
    driver: Driver = "aiomysql"

    def __init__(self, conn: Any, *, begin: bool = False) -> None:
        self.conn = conn
        self._begin = begin
        self._committed = False

    async def run(self, statement: Statement) -> Rows:
        from aiomysql import Cursor

        if self._committed:  # it would run in autocommit, alone: a plan's mistake
            raise OutboxError(f"{statement.query} follows its plan's commit")
        sql, params = bind(self.driver, self.dialect, statement)
        with translated():
            async with self.conn.cursor(Cursor) as cur:
                if statement.many:
                    if self._begin:
                        await self.conn.begin()
                        self._begin = False
                    await cur.executemany(sql, params)
                    return []
                if statement.together:
                    parts = [cur.mogrify(sql, p) for p in params]
                elif statement.union:
                    parts = [union_of(cur, sql, params)] if params else []
                else:
                    parts = [cur.mogrify(sql, params)]
                if not parts:
                    return []
                if self._begin:
                    parts.insert(0, query(self.dialect, "transaction_begin"))
                    self._begin = False
                if statement.commit:
                    parts.append(query(self.dialect, "transaction_commit"))
                    self._committed = True
                return await _every_result(cur, statement, parts)


async def _every_result(cur: Any, statement: Statement, parts: list[str]) -> Rows:
    """The rendered statements sent as one multi-statement (aiomysql's connections always
    accept them); the rows of every result set, in order, all read (a pending one would
    leave the connection unusable)."""
    await cur.execute(";\n".join(parts))
    rows: Rows = []
    columns = None
    sets: list[NamedRows] = []
    while True:
        if cur.description:
            columns = cur.description
            if statement.sets:
                sets.append(NamedRows(list(await cur.fetchall()), [c[0] for c in columns]))
            else:
                rows += await cur.fetchall()
        if not await cur.nextset():
            break
    if statement.sets:
        return NamedRows(sets[0], sets[0].columns, sets[1:]) if sets else []
    return _result(statement, rows, columns) if columns else rows


def union_of(cur: Any, sql: str, params: Sequence[Params]) -> str:
    """One statement of the block's parts, each rendered by the driver (a PyMySQL or
    aiomysql cursor's mogrify) with its own parameters and parenthesised: `(part) UNION ALL
    (part) ...`. A part keeps its own ORDER BY only with a LIMIT (MariaDB drops the order
    of a part without one), so a block meant as a part ends with both."""
    part = _from_the_first_keyword(sql)
    return "\nUNION ALL\n".join(f"(\n{cur.mogrify(part, p)}\n)" for p in params)


def django_driver(wrapper: Any) -> Driver:
    """The psycopg under a Django database connection (`django.db.connections[alias]`)."""
    if getattr(wrapper, "vendor", None) != "postgresql":
        raise UnsupportedConnection(
            f"Django's {getattr(wrapper, 'vendor', '?')} backend is not supported: "
            "emit and DjangoSync need django.db.backends.postgresql"
        )
    module = wrapper.Database.__name__
    if module not in ("psycopg", "psycopg2"):
        raise UnsupportedConnection(f"Django's postgresql backend runs on {module}")
    driver: Driver = "psycopg" if module == "psycopg" else "psycopg2"
    return driver


class DjangoExecutor:
    """On a Django database connection, through its cursors: Django's query logging and
    execute wrappers see our statements as they see the ORM's."""

    dialect: Dialect = "postgres"

    def __init__(self, wrapper: Any) -> None:
        self.driver: Driver = django_driver(wrapper)
        self.wrapper = wrapper

    def run(self, statement: Statement) -> Rows:
        sql, params = bind(self.driver, self.dialect, statement)
        with translated(), self.wrapper.cursor() as cur:
            if statement.many:
                cur.executemany(sql, params)
                return []
            cur.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []


# SQLAlchemy's driver names -> ours, per dialect.
_SQLALCHEMY_DRIVERS: dict[tuple[str, str], tuple[Dialect, Driver]] = {
    ("postgresql", "psycopg"): ("postgres", "psycopg"),
    ("postgresql", "psycopg2"): ("postgres", "psycopg2"),
    ("postgresql", "asyncpg"): ("postgres", "asyncpg"),
    ("sqlite", "pysqlite"): ("sqlite", "sqlite3"),
    ("sqlite", "aiosqlite"): ("sqlite", "sqlite3"),
    # SQLAlchemy names the dialect after the URL's scheme (mysql+ or mariadb+), whichever
    # server answers.
    ("mysql", "pymysql"): ("mariadb", "pymysql"),
    ("mariadb", "pymysql"): ("mariadb", "pymysql"),
    ("mysql", "mysqldb"): ("mariadb", "mysqldb"),
    ("mariadb", "mysqldb"): ("mariadb", "mysqldb"),
    ("mysql", "aiomysql"): ("mariadb", "aiomysql"),
    ("mariadb", "aiomysql"): ("mariadb", "aiomysql"),
}


def sqlalchemy_driver(sync_conn_or_engine: Any) -> tuple[Dialect, Driver]:
    """Our dialect and driver for a SQLAlchemy Connection or Engine."""
    name, driver = sync_conn_or_engine.dialect.name, sync_conn_or_engine.dialect.driver
    try:
        return _SQLALCHEMY_DRIVERS[(name, driver)]
    except KeyError:
        raise UnsupportedConnection(
            f"SQLAlchemy dialect {name}+{driver} is not supported: use postgresql+psycopg, "
            "postgresql+psycopg2, postgresql+asyncpg, sqlite, mysql+pymysql, mysql+mysqldb "
            "or mysql+aiomysql"
        ) from None


def sqlalchemy_dialect(sync_conn_or_engine: Any) -> Dialect:
    """Our dialect for a SQLAlchemy Connection or Engine (refusing unsupported drivers)."""
    return sqlalchemy_driver(sync_conn_or_engine)[0]


def _sqlalchemy_rows(statement: Statement, result: Any) -> Rows:
    if not result.returns_rows:
        return []
    rows = [tuple(r) for r in result.fetchall()]
    return NamedRows(rows, list(result.keys())) if statement.named else rows


class SqlAlchemyExecutor:
    """On a SQLAlchemy Connection (a Session's: session.connection())."""

    def __init__(self, conn: Any) -> None:
        self.dialect, self.driver = sqlalchemy_driver(conn)
        self.conn = conn

    def run(self, statement: Statement) -> Rows:
        sql, params = bind(self.driver, self.dialect, statement)
        with translated():
            result = self.conn.exec_driver_sql(sql, params)
            return _sqlalchemy_rows(statement, result)


class AsyncSqlAlchemyExecutor:
    """On a SQLAlchemy AsyncConnection (an AsyncSession's: await session.connection())."""

    def __init__(self, conn: Any) -> None:
        self.dialect, self.driver = sqlalchemy_driver(conn.sync_connection)
        self.conn = conn

    async def run(self, statement: Statement) -> Rows:
        sql, params = bind(self.driver, self.dialect, statement)
        with translated():
            result = await self.conn.exec_driver_sql(sql, params)
            return _sqlalchemy_rows(statement, result)


class AsyncPool(AsyncExecutor, Protocol):
    """An AsyncExecutor that owns its connections (PostgresPool, SqliteThread)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def run_plan(self, plan: Plan, *, write: bool = False) -> Any:
        """The plan on one connection. write: it changes rows; SQLite runs it under its
        write lock so its statements commit together; on Postgres every statement commits
        by itself, so writes that must commit together are written as one statement."""
        ...
