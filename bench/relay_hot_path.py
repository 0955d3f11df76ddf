"""The relay's own per-event CPU on its hot path, against the publisher alone, in one process.

A cycle of the relay claims rows, turns them into records, lets per-key order decide what
goes out, publishes through KafkaPublisher and settles (relay.pipeline.Step, the step the
relay's loop runs). This bench runs that step over prebuilt claimed rows with a real Kafka
(KAFKA_BOOTSTRAP_SERVERS) and a store that hands the rows out and settles in memory, so
the database's share is left out; and, as the baseline in the same process, the
publisher's publish over the same records built beforehand. CPU is this process's (user +
system) per event; the ratio is what the relay's bookkeeping costs on top of aiokafka. The
collector is set as `outbox-relay run` sets it (relay.cli.tune_collector), once the claims
are built.

    .venv/bin/python bench/relay_hot_path.py [--rows 8000] [--cycles 25] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare.topics import create_topic, delete_topics  # noqa: E402
from relay.cli import tune_collector  # noqa: E402
from relay.config import load_settings  # noqa: E402
from relay.pipeline import BatchRules, Step  # noqa: E402
from relay.store import ClaimedRow, ClaimRequest, Settled, SettleRequest, Store  # noqa: E402
from relay.transport import ACKED, KafkaPublisher, to_records  # noqa: E402


class RowsStore:
    """Hands out the prebuilt claims in turn; settles nothing anywhere."""

    def __init__(self, claims: list[list[ClaimedRow]]) -> None:
        self.claims, self.turn = claims, 0

    async def claim(self, request: ClaimRequest) -> list[ClaimedRow]:
        self.turn += 1
        return self.claims[(self.turn - 1) % len(self.claims)]

    async def settle(self, request: SettleRequest) -> Settled:
        return Settled(len(request.published_ids), len(request.failures))


def claimed(count: int, first_id: int, keys: int, rng: random.Random) -> list[ClaimedRow]:
    """Rows as the claim returns them: ~330-byte JSON payloads, 1,000 keys, 16 shards."""
    payload = json.dumps(
        {
            "order_id": first_id,
            "items": [{"sku": "SKU-" + "x" * 16, "qty": 2}] * 5,
            "note": "y" * 90,
        }
    ).encode()
    now = time.time()
    return [
        ClaimedRow(
            first_id + i, i % 16, str(uuid.uuid4()), "orders",
            f"customer-{rng.randrange(keys):04d}", "OrderPlaced", payload, "{}", 0, now, None,
        )
        for i in range(count)
    ]  # fmt: skip


async def relay_path(
    publisher: KafkaPublisher, rules: BatchRules, store: RowsStore, cycles: int
) -> tuple[int, float]:
    tokens = dict.fromkeys(range(16), 1)
    step = Step(rules, store=cast(Store, store), publisher=publisher)  # claim and settle only
    events, cpu = 0, time.process_time()
    for _ in range(cycles):
        sent = await step.send(tokens)
        assert sent is not None
        events += len(sent.published)
    await step.settled()
    return events, time.process_time() - cpu


async def publisher_alone(
    publisher: KafkaPublisher, rules: BatchRules, store: RowsStore, cycles: int
) -> tuple[int, float]:
    topics = {"orders": rules.topics.kafka_topic("orders")}
    built = [to_records(rows, topics, rules.max_request_size)[0] for rows in store.claims]
    events, cpu = 0, time.process_time()
    for n in range(cycles):
        outcomes = await publisher.publish(built[n % len(built)])
        events += sum(1 for o in outcomes if o is ACKED)
    return events, time.process_time() - cpu


async def run(args: argparse.Namespace) -> int:
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    prefix = f"bench-hot-{uuid.uuid4().hex[:8]}."
    os.environ.update(
        OUTBOX_DATABASE_URL="sqlite:////nonexistent/unused.db",  # never opened
        OUTBOX_KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        OUTBOX_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        OUTBOX_TOPIC_PREFIX=prefix,
    )
    settings = load_settings()
    rules = settings.batch_rules()
    await create_topic(bootstrap, prefix + "orders", 6, {})
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    rng = random.Random(7)
    store = RowsStore([claimed(args.rows, k * args.rows, 1000, rng) for k in range(4)])
    tune_collector()
    try:
        await relay_path(publisher, rules, store, 3)  # warm: metadata, topic limits
        await publisher_alone(publisher, rules, store, 3)
        print("| round | relay path µs/event | publisher alone µs/event | ratio |")
        print("| ---: | ---: | ---: | ---: |")
        for n in range(1, args.rounds + 1):
            ours, ours_cpu = await relay_path(publisher, rules, store, args.cycles)
            alone, alone_cpu = await publisher_alone(publisher, rules, store, args.cycles)
            a, b = ours_cpu / ours * 1e6, alone_cpu / alone * 1e6
            print(f"| {n} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)
    finally:
        await publisher.stop()
        await delete_topics(bootstrap, [prefix + "orders"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=8000, help="rows per claim (16 shards x 500)")
    p.add_argument("--cycles", type=int, default=25, help="cycles per measurement")
    p.add_argument("--rounds", type=int, default=3)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
