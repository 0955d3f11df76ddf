"""The variants bench/emit_overhead.py times: one-row order transactions through psycopg or a
SQLAlchemy ORM Session, without emit or with Outbox.emit in the same transaction (per-key
lock on or off), each run by one client or by several threads at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import BigInteger, create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from bench.shared.database import load_sql
from bench.shared.orders import EVENT_TYPE, TOPIC, Order, order_payload
from producer_lib import Outbox


class OrderRow(DeclarativeBase):
    pass


class OrderModel(OrderRow):
    """The orders table as a SQLAlchemy model, for the Session variants."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    customer: Mapped[str]
    amount_cents: Mapped[int]


# One client's transactions for one variant; the connection arguments are fixed per client.
Runner = Callable[[Sequence[Order]], None]


def psycopg_runner(conn: psycopg.Connection[Any], insert: str, outbox: Outbox | None) -> Runner:
    def run(orders: Sequence[Order]) -> None:
        for order in orders:
            # autocommit=False: the first execute sends BEGIN, commit() ends it.
            row = conn.execute(
                insert, {"customer": order.customer, "amount_cents": order.amount_cents}
            ).fetchone()
            assert row is not None
            if outbox is not None:
                outbox.emit(
                    conn,
                    topic=TOPIC,
                    key=order.customer,
                    event_type=EVENT_TYPE,
                    payload=order_payload(int(row[0]), order),
                )
            conn.commit()

    return run


def sqlalchemy_runner(engine: Engine, outbox: Outbox | None) -> Runner:
    def run(orders: Sequence[Order]) -> None:
        for order in orders:
            with Session(engine) as session, session.begin():
                model = OrderModel(customer=order.customer, amount_cents=order.amount_cents)
                session.add(model)
                session.flush()
                if outbox is not None:
                    outbox.emit(
                        session,
                        topic=TOPIC,
                        key=order.customer,
                        event_type=EVENT_TYPE,
                        payload=order_payload(model.id, order),
                    )

    return run


@dataclass(frozen=True)
class Variant:
    name: str
    baseline: str  # the variant this one is compared with ("" for a baseline)
    runners: list[Runner]  # one per client


def timed(runners: Sequence[Runner], orders: Sequence[Order]) -> float:
    """Run orders split across the clients at once; returns wall seconds."""
    clients = len(runners)
    if clients == 1:
        start = time.perf_counter()
        runners[0](orders)
        return time.perf_counter() - start
    shares = [orders[i::clients] for i in range(clients)]
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def work(runner: Runner, share: Sequence[Order]) -> None:
        barrier.wait()
        try:
            runner(share)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(r, s), daemon=True)
        for r, s in zip(runners, shares, strict=True)
    ]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def build_variants(
    url: str, clients: int, with_sqlalchemy: bool, stack: list[Callable[[], None]]
) -> list[Variant]:
    insert = load_sql("orders.sql")["order_insert"]
    lock_on, lock_off = Outbox(), Outbox(per_key_lock=False)
    conns: list[psycopg.Connection[Any]] = []
    for _ in range(clients):
        conn = psycopg.connect(url, autocommit=False)
        stack.append(conn.close)
        conns.append(conn)
    variants = [
        Variant("psycopg baseline", "", [psycopg_runner(c, insert, None) for c in conns]),
        Variant(
            "psycopg emit, lock on",
            "psycopg baseline",
            [psycopg_runner(c, insert, lock_on) for c in conns],
        ),
        Variant(
            "psycopg emit, lock off",
            "psycopg baseline",
            [psycopg_runner(c, insert, lock_off) for c in conns],
        ),
    ]
    if with_sqlalchemy:
        engine = create_engine(
            "postgresql+psycopg://" + url.split("://", 1)[1],
            pool_size=clients,
            max_overflow=0,
        )
        stack.append(engine.dispose)
        variants += [
            Variant("sqlalchemy baseline", "", [sqlalchemy_runner(engine, None)] * clients),
            Variant(
                "sqlalchemy emit, lock on",
                "sqlalchemy baseline",
                [sqlalchemy_runner(engine, lock_on)] * clients,
            ),
        ]
    return variants
