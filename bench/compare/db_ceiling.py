"""The database ceiling of bench/relay_compare.py: the relay's statements without Kafka.

The same store the relay uses (its pool, autocommit) and the relay's cycle: claim a batch
for every shard in one statement (`outbox_claim_batch`, block_key policy) and settle it at
once as published in one statement (`outbox_settle_delete`, or `outbox_settle_keep` with
--keep; fenced by each shard's lease), until the claim comes back empty. Nothing is sent
anywhere: this is how fast the database lets the rows be claimed and settled with these
statements on this machine.

    .venv/bin/python -m bench.ceiling --database-url URL [--batch-size 500] [--keep]

Prints one JSON line: first claim and last settle (epoch seconds), rows settled, and
this process's CPU seconds and peak RSS. The collector is set as `outbox-relay run` sets
it (relay.cli.tune_collector), so the CPU compares with the relay's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence

from pydantic import SecretStr

from bench.shared.procstat import sample
from relay.cli import tune_collector
from relay.database import DatabaseSettings, make_store
from relay.store import ClaimRequest, SettleRequest, Store

OWNER = "bench-ceiling"


async def lease_all(store: Store, owner: str) -> dict[int, int]:
    """Every shard's lease for `owner`: the relay's cycle claims and settles under them."""
    tokens: dict[int, int] = {}
    for shard in range(await store.shard_count()):
        token = await store.lease_acquire(shard, owner, 600.0)
        if token is None:
            raise RuntimeError(f"shard {shard} is leased by someone else")
        tokens[shard] = token
    return tokens


async def release_all(store: Store, owner: str, tokens: dict[int, int]) -> None:
    for shard, token in tokens.items():
        await store.lease_release(shard, owner, token)


def measured(first: float, done: float, count: int, cpu_first: float) -> dict[str, float]:
    """The JSON line this program and bench/compare/kafka_ceiling.py print: the window, its count,
    this process's CPU in it and since start, and its peak RSS."""
    cpu_done = time.process_time()
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across execve, so a program
    # the bench launched reported the bench's own peak (336 MiB) when that was higher.
    own = sample(os.getpid())
    assert own is not None
    return {
        "first": first,
        "done": done,
        "count": count,  # rows settled, or records acked
        "cpu_active_s": cpu_done - cpu_first,
        "cpu_total_s": cpu_done,
        "peak_rss_bytes": own.peak_rss_bytes,
    }


async def drain(url: str, batch_size: int, keep: bool = False) -> dict[str, float]:
    store = make_store(DatabaseSettings(database_url=SecretStr(url)))
    await store.open()
    try:
        tokens = await lease_all(store, OWNER)
        first: float | None = None
        cpu_first = 0.0
        settled = 0
        while True:
            rows = await store.claim(ClaimRequest(list(tokens), batch_size, "block_key"))
            if not rows:
                break
            if first is None:
                first, cpu_first = time.time(), time.process_time()
            await store.settle(SettleRequest(OWNER, tokens, [r.id for r in rows], [], keep))
            settled += len(rows)
        done = time.time()
        result = measured(
            done if first is None else first,
            done,
            settled,
            time.process_time() if first is None else cpu_first,
        )
        await release_all(store, OWNER, tokens)
    finally:
        await store.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", required=True)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--keep", action="store_true", help="mark rows published (retention=keep)")
    args = p.parse_args(argv)
    tune_collector()
    result = asyncio.run(drain(args.database_url, args.batch_size, args.keep))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
