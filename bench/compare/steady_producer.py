"""Offered load for bench/relay_compare.py: commits events with producer_lib at a steady rate.

On a Postgres or a MariaDB outbox. Every tick it emits, in one transaction (`Outbox.emit_batch`), the events that are due by
then, so the rate holds even when a commit is slow. Each event's JSON payload carries its
sequence number; after the run, one line per event "seq commit_epoch_s" (the wall clock
right after its COMMIT returned) is written to --out. A process of its own, so that the
consumer that takes receive times never waits for this one's Python.

    .venv/bin/python -m bench.steady_producer --database-url URL --rate 2000 --seconds 20 \
        --first-seq 0 --out commits.txt
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Sequence

from bench.shared.orders import make_orders, sequenced_order_event
from outbox_core.database_url import DatabaseUrl
from producer_lib import Outbox


def produce(
    url: str, rate: float, seconds: float, first_seq: int, keys: int, tick_s: float
) -> tuple[list[float], float]:
    rng = random.Random(first_seq)
    orders = make_orders(rng, 500)
    outbox = Outbox()
    total = int(rate * seconds)
    commit_at = [0.0] * total
    sent = 0
    # Postgres (psycopg) or MariaDB (PyMySQL): emit_batch takes either driver's connection.
    with contextlib.closing(DatabaseUrl.parse(url).connect(autocommit=False)) as conn:
        start = time.monotonic()
        while sent < total:
            due = min(total, int(rate * (time.monotonic() - start)) + 1)
            if due > sent:
                outbox.emit_batch(
                    conn,
                    [
                        sequenced_order_event(rng, keys, first_seq + i, orders[i % len(orders)])
                        for i in range(sent, due)
                    ],
                )
                conn.commit()
                now = time.time()
                for i in range(sent, due):
                    commit_at[i] = now
                sent = due
            if start + sent / rate > time.monotonic():
                time.sleep(tick_s)  # caught up: what falls due meanwhile goes in one tx
        elapsed = time.monotonic() - start
    return commit_at, elapsed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--first-seq", type=int, default=0)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--tick-s", type=float, default=0.005)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    commit_at, elapsed = produce(
        args.database_url, args.rate, args.seconds, args.first_seq, args.keys, args.tick_s
    )
    with open(args.out, "w") as out:
        out.write(f"# elapsed {elapsed:.6f}\n")
        out.writelines(f"{args.first_seq + i} {t:.6f}\n" for i, t in enumerate(commit_at))
    return 0


if __name__ == "__main__":
    sys.exit(main())
