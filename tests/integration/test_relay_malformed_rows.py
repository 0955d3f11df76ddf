"""Rows that cannot become records, written around producer_lib with raw SQL (as before
the headers constraint, or by any role with INSERT), on real Postgres, a SQLite file and
real Kafka: each is parked at once with what is wrong with it, every other row publishes,
and per-key order holds (a parked row blocks its key, until an operator discards it)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest

from outbox_core.sharding import shard_for
from relay.ops import admin
from relay.pipeline.step import Step
from relay.transport.memory import MemoryPublisher
from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.relay import judge_topic, relay_settings, running_relay, wait_drained
from tests.support.stores import SHARD_COUNT, emit, event, opened_store
from tests.support.waits import until

pytestmark = pytest.mark.integration

GOOD_KEYS = 60
GOOD_ROWS = 3000


@dataclass(frozen=True)
class Hostile:
    name: str
    headers: Any
    why: str  # part of the row's last_error
    key: Any = None  # None: a text key of its own, which good rows share
    payload: Any = b"{}"


BOTH = [
    Hostile("array", "[1, 2]", "headers are an array, not a JSON object"),
    Hostile("string", '"text"', "headers are a string, not a JSON object"),
    Hostile("null", "null", "headers are null, not a JSON object"),
    Hostile("number-value", '{"retry": 3}', "header 'retry' is a number, not a string"),
    Hostile("object-value", '{"n": {"a": "b"}}', "header 'n' is an object, not a string"),
]
SQLITE_ONLY = [  # Postgres's column types refuse these
    Hostile("not-json", "{oops", "headers are not JSON"),
    Hostile("blob-key", "{}", "its key is a bytes, not str", key=b"\xff\x00"),
    Hostile("text-payload", "{}", "its payload is a str, not bytes", payload="plain"),
]


def hostile_kinds(backend: Backend) -> list[Hostile]:
    return BOTH + (SQLITE_ONLY if backend.dialect == "sqlite" else [])


def rows(backend: Backend) -> dict[int, tuple[Any, ...]]:
    """id -> (event_id, key, status, published, last_error, attempts)."""
    return {
        int(r[0]): (str(r[1]), r[3], r[9], r[10] is not None, r[11], int(r[8]))
        for r in backend.fetch("outbox_rows_all")
    }


def write_outbox(backend: Backend, topic: str) -> tuple[dict[int, Hostile], set[int]]:
    """Good rows, then the hostile rows (each on a key of its own, after one good row of
    that key), then more good rows (one more behind each hostile row): returns the
    hostile rows by id and the good rows that wait behind one."""
    backend.execute("outbox_headers_check_drop")
    kinds = hostile_kinds(backend)
    keys = [f"k{i}" for i in range(GOOD_KEYS)]
    half = GOOD_ROWS // 2
    emit(backend, *(event(keys[i % GOOD_KEYS], topic=topic) for i in range(half)))
    emit(backend, *(event(f"bad-{k.name}", topic=topic) for k in kinds))
    hostile: dict[int, Hostile] = {}
    for kind in kinds:
        key = kind.key if kind.key is not None else f"bad-{kind.name}"
        shard = shard_for(key, SHARD_COUNT) if isinstance(key, str) else 0
        params = {"topic": topic, "key": key, "shard": shard, "payload": kind.payload}
        [(row_id,)] = backend.fetch("outbox_insert_hostile", {**params, "headers": kind.headers})
        hostile[int(row_id)] = kind
    behind = emit(backend, *(event(f"bad-{k.name}", topic=topic) for k in kinds))
    emit(backend, *(event(keys[i % GOOD_KEYS], topic=topic) for i in range(half, GOOD_ROWS)))
    waiting = {
        row_id for row_id, kind in zip(behind, kinds, strict=True) if kind.key is None
    }  # a hostile row with a key of another type blocks no text key
    return hostile, waiting


async def test_malformed_rows_are_parked_and_every_other_row_publishes_in_key_order(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("malformed")
    hostile, waiting = write_outbox(backend, topic)
    good = {i: r for i, r in rows(backend).items() if i not in hostile}
    expected: dict[str, list[str]] = defaultdict(list)
    for event_id, key, *_ in good.values():
        expected[key].append(event_id)

    def settled() -> bool:
        now = rows(backend)
        parked = {i for i, r in now.items() if r[2] == "parked"}
        pending = {i for i, r in now.items() if r[2] == "pending" and not r[3]}
        return parked == set(hostile) and pending == waiting

    async with running_relay(relay_settings(backend, kafka_bootstrap, batch_size=200)):
        await until(settled, 90, "the outbox to reach the expected state", blocking=True)
        now = rows(backend)
        for row_id, kind in hostile.items():
            _, _, status, published, last_error, attempts = now[row_id]
            assert (status, published, attempts) == ("parked", False, 1), kind.name
            assert last_error.startswith("malformed row: "), kind.name
            assert kind.why in last_error, kind.name
        for row_id in waiting:
            assert now[row_id][5] == 0  # held behind its key's parked row, never charged

        # The operator discards the parked rows: their keys' later rows go out, in order.
        changed = admin.parked_discard(backend.url, admin.RowFilter(ids=sorted(hostile)))
        assert sorted(changed.ids) == sorted(hostile)
        await wait_drained(backend)

    verdict = await judge_topic(kafka_bootstrap, topic, dict(expected))
    assert verdict.missing(e for ids in expected.values() for e in ids) == set()
    assert verdict.unexpected(e for ids in expected.values() for e in ids) == set()
    assert verdict.order_violations == []
    assert verdict.records == len(good)


async def test_under_skip_a_malformed_row_holds_nothing_back(backend: Backend) -> None:
    """The same rows through one step with the in-memory publisher: under skip, the rows
    behind a malformed one of their key go out in the same claim."""
    hostile, waiting = write_outbox(backend, "orders")
    settings = relay_settings(backend, "127.0.0.1:9092", batch_size=10_000, failure_policy="skip")
    publisher = MemoryPublisher()
    async with opened_store(backend) as store:
        tokens = {}
        for shard in range(SHARD_COUNT):
            token = await store.lease_acquire(shard, settings.leases.replica_id, 30)
            assert token is not None
            tokens[shard] = token
        outcome = await Step(settings.batch_rules(), store=store, publisher=publisher).run(tokens)
    assert (outcome.parked, outcome.retried) == (len(hostile), 0)
    assert outcome.published == GOOD_ROWS + 2 * len(hostile_kinds(backend))
    now = rows(backend)
    assert {i for i, r in now.items() if not r[3]} == set(hostile)
    assert waiting <= {i for i, r in now.items() if r[3]}
    sent_keys: dict[bytes, list[str]] = defaultdict(list)
    for record in publisher.sent:
        sent_keys[record.key].append(dict(record.headers)["event_id"].decode())
    for event_id, key, *_ in (r for i, r in now.items() if i not in hostile):
        assert event_id in sent_keys[key.encode()]
    for key, ids in sent_keys.items():
        by_id = {r[0]: i for i, r in now.items()}
        assert [by_id[e] for e in ids] == sorted(by_id[e] for e in ids), key
