"""The Kafka ceiling of bench/relay_compare.py: the relay's own publisher producing the
backlog's records from memory, without the database.

Untimed first: the rows are claimed from the loaded outbox with the relay's store, cycle
by cycle as the relay's cycle claims them (every shard in one statement, batch_size rows
per shard), deleted as they are read, and turned into records by relay.transport.to_records.
Then timed: each cycle's records are published with KafkaPublisher.publish (which returns
once all their acks are in) before the next cycle's records go, one cycle after another as
in the relay.
Records the publisher holds back (a key that would span two record batches) go with the
next cycle's, as the relay claims them again. Every setting is the relay's
(relay.config.load_settings: the OUTBOX_* environment the relay gets). The collector is
set as `outbox-relay run` sets it (relay.cli.tune_collector), once the backlog is in memory, so no
collection walks the backlog and the CPU compares with the relay's.

    .venv/bin/python -m bench.kafka_ceiling

Prints one JSON line: first hand-over and last ack (epoch seconds), records acked, this
process's CPU seconds in that window and since start, and its peak RSS (which includes
the whole backlog held in memory).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from bench.compare.db_ceiling import lease_all, measured, release_all
from relay.cli import tune_collector
from relay.config import RelaySettings, load_settings
from relay.database import make_store
from relay.store import ClaimRequest, SettleRequest
from relay.transport import HELD, KafkaPublisher, OutgoingRecord, PublishFailed, to_records

OWNER = "bench-kafka-ceiling"


async def read_cycles(settings: RelaySettings) -> list[list[OutgoingRecord]]:
    """The records of each cycle the relay would run over this outbox, in its order."""
    store = make_store(settings.database)
    await store.open()
    cycles: list[list[OutgoingRecord]] = []
    try:
        tokens = await lease_all(store, OWNER)
        batch = settings.batch
        while rows := await store.claim(
            ClaimRequest(list(tokens), batch.batch_size, batch.failure_policy)
        ):
            topic_of = {t: settings.topics.kafka_topic(t) for t in {row.topic for row in rows}}
            cycles.append(to_records(rows, topic_of, settings.kafka.max_request_size)[0])
            await store.settle(SettleRequest(OWNER, tokens, [row.id for row in rows], [], False))
        await release_all(store, OWNER, tokens)
    finally:
        await store.close()
    return cycles


async def produce(settings: RelaySettings, cycles: list[list[OutgoingRecord]]) -> dict[str, float]:
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    await publisher.start()
    try:
        first, cpu_first = time.time(), time.process_time()
        held: list[OutgoingRecord] = []
        for records in cycles:
            held = await send_cycle(publisher, held + records)
        while held:
            held = await send_cycle(publisher, held)
        done = time.time()
        return measured(first, done, sum(len(records) for records in cycles), cpu_first)
    finally:
        await publisher.stop()


async def send_cycle(
    publisher: KafkaPublisher, records: list[OutgoingRecord]
) -> list[OutgoingRecord]:
    """Publish one cycle's records (their acks in); returns the ones held back."""
    outcomes = await publisher.publish(records)
    held: list[OutgoingRecord] = []
    for record, outcome in zip(records, outcomes, strict=True):
        if outcome is HELD:
            held.append(record)
        elif isinstance(outcome, PublishFailed):
            raise outcome
    return held


async def run() -> dict[str, float]:
    settings = load_settings()
    cycles = await read_cycles(settings)
    tune_collector()
    return await produce(settings, cycles)


def main() -> int:
    print(json.dumps(asyncio.run(run())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
