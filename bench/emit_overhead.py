"""Transactions per second on Postgres with and without producer_lib's emit, in one run.

Each transaction is a one-row business write: BEGIN; INSERT INTO orders ... RETURNING id;
COMMIT. The emit variants add `Outbox.emit(...)` of a ~300-byte JSON event to the same
transaction, with the per-key advisory lock on (the default) or off. The variants are
interleaved in rounds (the order rotates every round) so that a noisy machine slows all of
them alike; the report gives the median tx/s of each and the ratio to the baseline.

    eval "$(.venv/bin/python scripts/services.py env)"
    .venv/bin/python bench/emit_overhead.py [--transactions 2000] [--rounds 5] [--clients 1]

The benchmark creates a private database bench_<random> on DATABASE_URL's server, migrates
it with outbox_core.migrate and drops it at the end. It is a measurement: it exits 0
whatever the overhead, and non-zero only on errors.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from sqlalchemy import BigInteger, create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from outbox_core.database_url import DatabaseUrl
from outbox_core.queries import parse_blocks
from producer_lib import Event, Outbox, migrate

SQL_DIR = Path(__file__).resolve().parent / "sql"
TARGET_OVERHEAD = 0.15
DISTINCT_KEYS = 1000
TOPIC = "orders"
EVENT_TYPE = "OrderPlaced"


def load_sql(name: str) -> dict[str, str]:
    path = SQL_DIR / name
    return parse_blocks(path.read_text("utf-8"), str(path))


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Order:
    """One transaction's input, built before the clock starts."""

    customer: str
    amount_cents: int
    details: dict[str, Any]


def make_orders(rng: random.Random, count: int) -> list[Order]:
    orders: list[Order] = []
    for _ in range(count):
        customer = f"customer-{rng.randrange(DISTINCT_KEYS):04d}"
        lines = [(rng.randrange(1_000_000), rng.randint(1, 5), rng.randint(100, 20_000))]
        lines.append((rng.randrange(1_000_000), rng.randint(1, 5), rng.randint(100, 20_000)))
        items = [
            {"sku": f"SKU-{sku:06d}", "quantity": qty, "unit_price_cents": price}
            for sku, qty, price in lines
        ]
        amount = sum(qty * price for _, qty, price in lines)
        details: dict[str, Any] = {
            "customer_id": customer,
            "amount_cents": amount,
            "currency": "EUR",
            "items": items,
            "shipping": {"method": "standard", "country": "DE", "postcode": "10115"},
            "placed_at": "2024-11-29T10:51:00+00:00",
        }
        orders.append(Order(customer, amount, details))
    return orders


def order_payload(order_id: int, order: Order) -> dict[str, Any]:
    return {"order_id": order_id, **order.details}


def sequenced_order_event(rng: random.Random, keys: int, seq: int, order: Order) -> Event:
    """The relay benchmarks' event: a random one of `keys` customers as its key, and its
    sequence number in the payload (for latency and loss accounting)."""
    return Event(
        TOPIC,
        f"customer-{rng.randrange(keys):04d}",
        EVENT_TYPE,
        {"seq": seq, **order_payload(seq, order)},
    )


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


# --------------------------------------------------------------------------- database


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


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Result:
    name: str
    baseline: str
    tps: list[float]  # one per round

    @property
    def median(self) -> float:
        return statistics.median(self.tps)


def ratio(result: Result, by_name: dict[str, Result]) -> float | None:
    if not result.baseline:
        return None
    return result.median / by_name[result.baseline].median


def paired_ratio(result: Result, by_name: dict[str, Result]) -> float | None:
    """Median over rounds of this round's tx/s over its baseline's in the same round."""
    if not result.baseline:
        return None
    base = by_name[result.baseline].tps
    return statistics.median(v / b for v, b in zip(result.tps, base, strict=True))


def markdown_table(rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """rows[0] is the header; the first `left` columns are left-aligned, the rest right-aligned,
    every cell padded to its column's width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|".join(("-" * (w + 1)) + (":" if i >= left else "-") for i, w in enumerate(widths))
    return [line(rows[0]), "|" + rule + "|", *(line(row) for row in rows[1:])]


def print_table(results: Sequence[Result], clients: int) -> None:
    """A Markdown table, so that a run can be pasted into docs/benchmarks.md as it is."""
    by_name = {r.name: r for r in results}
    rows = [
        (
            "variant",
            "median tx/s",
            "min tx/s",
            "max tx/s",
            "ms/tx",
            "added ms/tx",
            "ratio",
            "overhead",
            "paired ratio",
        )
    ]
    for r in results:
        ms = 1000.0 * clients / r.median
        rat = ratio(r, by_name)
        pair = paired_ratio(r, by_name)
        if rat is None or pair is None:
            extra = ("", "", "", "")
        else:
            added = ms - 1000.0 * clients / by_name[r.baseline].median
            extra = (f"{added:+.3f}", f"{rat:.3f}", f"{1 - rat:.1%}", f"{pair:.3f}")
        rows.append(
            (
                r.name,
                f"{r.median:.1f}",
                f"{min(r.tps):.1f}",
                f"{max(r.tps):.1f}",
                f"{ms:.3f}",
                *extra,
            )
        )
    print("\n".join(markdown_table(rows, left=1)))
    print()
    print(
        "ratio = median tx/s / its baseline's median tx/s; overhead = 1 - ratio; "
        "paired ratio = median over rounds of the same round's ratio"
    )
    print(
        "ms/tx = wall time per transaction"
        + (f" per client ({clients} clients / tx/s)" if clients > 1 else "")
    )


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--transactions", type=int, default=2000, help="per variant per round (default 2000)"
    )
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument(
        "--clients", type=int, default=1, help="threads, one connection each (default 1)"
    )
    p.add_argument(
        "--warmup", type=int, default=200, help="unmeasured transactions per variant first"
    )
    p.add_argument(
        "--sqlalchemy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure a SQLAlchemy ORM Session pair, baseline vs emit (default on)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="server to create the private database on (default $DATABASE_URL)",
    )
    args = p.parse_args(argv)
    if not args.database_url:
        p.error('DATABASE_URL is not set: eval "$(.venv/bin/python scripts/services.py env)"')
    for name in ("transactions", "rounds", "clients"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    return args


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


def run(args: argparse.Namespace) -> int:
    server_url = DatabaseUrl.parse(args.database_url).url
    if DatabaseUrl.parse(args.database_url).dialect != "postgres":
        print("emit_overhead: DATABASE_URL must be a Postgres URL", file=sys.stderr)
        return 2
    dbname = f"bench_{uuid.uuid4().hex[:12]}"
    url = with_database(server_url, dbname)
    rng = random.Random(args.seed)
    version = server_version(server_url)
    admin(server_url, "bench_database_create", dbname)
    cleanup: list[Callable[[], None]] = []
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(load_sql("orders.sql")["orders_create_table"])
        variants = build_variants(url, args.clients, args.sqlalchemy, cleanup)
        sample = order_payload(1, make_orders(rng, 1)[0])
        payload_bytes = len(Outbox().serializer(sample).data)

        print(f"server:   {version}")
        print(
            f"workload: {args.rounds} rounds x {args.transactions} tx per variant, "
            f"{args.clients} client(s), {DISTINCT_KEYS} keys, payload {payload_bytes} B JSON, "
            f"database {dbname}"
        )
        if args.warmup:
            warm = make_orders(rng, args.warmup)
            for v in variants:
                timed(v.runners, warm)

        tps: dict[str, list[float]] = {v.name: [] for v in variants}
        for rnd in range(args.rounds):
            shift = rnd % len(variants)
            order = variants[shift:] + variants[:shift]
            line = []
            for v in order:
                orders = make_orders(rng, args.transactions)
                seconds = timed(v.runners, orders)
                tps[v.name].append(args.transactions / seconds)
                line.append(f"{v.name} {tps[v.name][-1]:.0f}")
            print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(line) + " tx/s", flush=True)
    finally:
        for close in reversed(cleanup):
            try:
                close()
            except Exception as exc:
                print(f"emit_overhead: cleanup: {exc}", file=sys.stderr)
        admin(server_url, "bench_database_drop", dbname)

    results = [Result(v.name, v.baseline, tps[v.name]) for v in variants]
    print()
    print_table(results, args.clients)
    by_name = {r.name: r for r in results}
    on = ratio(by_name["psycopg emit, lock on"], by_name)
    off = ratio(by_name["psycopg emit, lock off"], by_name)
    assert on is not None
    assert off is not None
    print()
    print(
        f"overhead: emit adds {1 - on:.1%} (lock on), {1 - off:.1%} (lock off); "
        f"target <= {TARGET_OVERHEAD:.0%}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("emit_overhead: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"emit_overhead: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
