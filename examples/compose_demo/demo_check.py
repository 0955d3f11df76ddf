"""The compose demo's verdict: waits until every order has been relayed and applied, then
prints the round trip and exits 0 (1 after DEMO_CHECK_TIMEOUT_S, saying what is missing).

Environment: DATABASE_URL, DEMO_ORDERS (50), DEMO_GROUP (billing), DEMO_CHECK_TIMEOUT_S (300).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from outbox_core.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_name("demo.sql").read_text(), "demo.sql")


@dataclass(frozen=True)
class Counts:
    orders: int
    unpublished: int
    invoices: int
    processed: int
    orders_without_invoice: int
    invoices_per_order_max: int

    def complete(self, expected: int) -> bool:
        return (
            self.orders == expected
            and self.unpublished == 0
            and self.invoices == expected
            and self.processed >= expected
            and self.orders_without_invoice == 0
        )


def counts(url: str, group: str) -> Counts:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(SQL["demo_round_trip_counts"], {"group": group}).fetchone()
    assert row is not None
    return Counts(*(int(v) for v in row))


def main() -> int:
    url = os.environ["DATABASE_URL"]
    expected = int(os.environ.get("DEMO_ORDERS", "50"))
    group = os.environ.get("DEMO_GROUP", "billing")
    timeout = float(os.environ.get("DEMO_CHECK_TIMEOUT_S", "300"))
    deadline = time.monotonic() + timeout
    last: Counts | str = "nothing yet"
    while time.monotonic() < deadline:
        try:
            last = counts(url, group)
        except psycopg.Error as exc:  # the database or the demo tables are not there yet
            last = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        if isinstance(last, Counts) and last.complete(expected):
            print(
                f"demo-check: round trip complete: {last.orders} orders emitted with their events "
                f"in the same transaction; {last.orders - last.unpublished} relayed to Kafka "
                f"({last.unpublished} left in the outbox); {last.invoices} invoices applied "
                f"exactly once (processed_events for group {group}: {last.processed}, "
                f"most invoices for one order: {last.invoices_per_order_max})",
                flush=True,
            )
            return 0
        time.sleep(1.0)
    print(f"demo-check: FAILED after {timeout:.0f}s: {last}", flush=True)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
