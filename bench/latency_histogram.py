"""What the commit-to-ack histogram costs the relay per event, in one process: the batch
histogram (relay.ops.metrics.BatchHistogram, every event of a batch in one pass) against
prometheus_client's Histogram with one observe() per event, and against the one
observation per batch of the batch's oldest row that the relay made before.

Batches are the relay's ClaimedRow tuples, created_at a few ms apart in claim order (as a
claim returns them). Prints the best of --rounds per method, in ns per event, and the
ratios to the batch histogram.

    .venv/bin/python bench/latency_histogram.py [--rows 4000] [--batches 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from operator import attrgetter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, Histogram  # noqa: E402

from relay.ops.metrics import _LATENCY_BUCKETS, BatchHistogram  # noqa: E402
from relay.store import ClaimedRow  # noqa: E402

_CREATED_AT = attrgetter("created_at")


def batch(rows: int, now: float) -> list[ClaimedRow]:
    return [
        ClaimedRow(i, i % 16, "e", "t", "k", "T", b"", "{}", 0, now - 0.02 + i * 1e-6, None)
        for i in range(rows)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = batch(args.rows, time.time())
    batched = BatchHistogram("b", "b", _LATENCY_BUCKETS, CollectorRegistry())
    per_event = Histogram("p", "p", buckets=_LATENCY_BUCKETS, registry=CollectorRegistry())
    oldest = Histogram("o", "o", buckets=_LATENCY_BUCKETS, registry=CollectorRegistry())

    def run_batched() -> None:
        batched.observe_since(time.time(), list(map(_CREATED_AT, rows)))

    def run_per_event() -> None:
        now = time.time()
        for created in map(_CREATED_AT, rows):
            per_event.observe(now - created)

    def run_oldest() -> None:
        oldest.observe(time.time() - min(map(_CREATED_AT, rows)))

    methods = {
        "batch histogram, per event (the relay's)": run_batched,
        "Histogram.observe per event": run_per_event,
        "oldest row only, per batch (before)": run_oldest,
    }
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, run in methods.items():
            start = time.perf_counter()
            for _ in range(args.batches):
                run()
            took = (time.perf_counter() - start) / (args.batches * args.rows)
            best[name] = min(best.get(name, took), took)
    base = best["batch histogram, per event (the relay's)"]
    print(f"{args.rows} rows a batch, best of {args.rounds} rounds of {args.batches} batches")
    print("| method | ns / event | ratio to the batch histogram |")
    print("| --- | ---: | ---: |")
    for name, took in best.items():
        print(f"| {name} | {took * 1e9:.0f} | {took / base:.2f} |")


if __name__ == "__main__":
    main()
