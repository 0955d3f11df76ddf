"""The backlog every contender drains: written once by producer_lib into a template database,
copied into a database per drain, loaded into that copy's outbox in LOAD_CHUNK-row
transactions."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from bench.compare.common import LOAD_CHUNK, QM, Q, say
from bench.compare.services import Services
from bench.shared.database import admin, with_database
from bench.shared.orders import make_orders, sequenced_order_event
from outbox_core.database_url import DatabaseUrl
from producer_lib import Outbox, migrate


@dataclass(frozen=True)
class Backlog:
    template: str
    events: int
    payload_bytes: float
    keys: int


def build_template(services: Services, run_id: str, events: int, keys: int, seed: int) -> Backlog:
    """producer_lib writes the events once; every contender's database is a copy."""
    name = f"bench_{run_id}_tpl"
    url = with_database(services.url, name)
    admin(services.url, "bench_database_create", name)
    migrate(url)
    rng = random.Random(seed)
    outbox = Outbox()
    started = time.monotonic()
    with psycopg.connect(url, autocommit=False) as conn:
        for start in range(0, events, LOAD_CHUNK):
            batch = make_orders(rng, min(LOAD_CHUNK, events - start))
            outbox.emit_batch(
                conn,
                [
                    sequenced_order_event(rng, keys, start + i, order)
                    for i, order in enumerate(batch)
                ],
            )
            conn.commit()
        for block in ("backlog_create", "backlog_index", "outbox_truncate"):
            conn.execute(Q[block])
        conn.commit()
        row = conn.execute(Q["payload_size_avg"]).fetchone()
    assert row is not None
    say(
        f"template {name}: {events} events written by producer_lib in {time.monotonic() - started:.1f}s"
    )
    return Backlog(name, events, float(row[0]), int(row[1]))


def copy_database(services: Services, backlog: Backlog, name: str) -> str:
    statement = sql.SQL(Q["bench_database_from_template"]).format(
        dbname=sql.Identifier(name), template=sql.Identifier(backlog.template)
    )
    with psycopg.connect(services.url, autocommit=True) as conn:
        conn.execute(statement)
    return with_database(services.url, name)


def drop_database(services: Services, name: str) -> None:
    try:
        admin(services.url, "bench_database_drop", name)
    except psycopg.Error as exc:
        say(f"could not drop {name}: {exc}")


def load_backlog(url: str, events: int) -> float:
    """Fill the outbox from bench_backlog in LOAD_CHUNK-row transactions; returns seconds."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=False) as conn:
        for after in range(0, events, LOAD_CHUNK):
            conn.execute(Q["backlog_load_chunk"], {"after": after, "upto": after + LOAD_CHUNK})
            conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(Q["outbox_vacuum_analyze"])
        conn.execute(Q["server_checkpoint"])
    return time.monotonic() - started


def load_backlog_mariadb(template_url: str, url: str, events: int) -> float:
    """Fill a MariaDB outbox with the template's backlog, the same rows in the same order,
    in LOAD_CHUNK-row transactions; returns seconds."""
    started = time.monotonic()
    target = DatabaseUrl.parse(url)
    maria = target.connect(autocommit=False)
    try:
        with psycopg.connect(template_url, row_factory=dict_row) as source:
            for after in range(0, events, LOAD_CHUNK):
                rows = source.execute(
                    Q["backlog_rows"], {"after": after, "upto": after + LOAD_CHUNK}
                ).fetchall()
                with maria.cursor() as cur:
                    cur.executemany(QM["backlog_insert"], rows)
                maria.commit()
        with maria.cursor() as cur:
            cur.execute(QM["outbox_analyze"])
            cur.fetchall()
        maria.commit()
    finally:
        maria.close()
    return time.monotonic() - started
