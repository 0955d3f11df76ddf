"""What never stops a consumer, on real Kafka and real databases: dedup rows purged per
group by the group's own retention, records that cannot be decoded in any way, dead-letter
topics that can never take a record, and a handler's own timeouts.

Each test runs a Consumer in this process against private topics and a private database,
and ends with the group's committed offsets read back from the broker: the partition moved
past the bad record.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from consumer_lib import ConsumedEvent, ConsumerApp
from tests.conftest import TopicFactory
from tests.support.consumers import (
    Outgoing,
    RunningConsumer,
    backdate_processed,
    dead_letters,
    effect_handler,
    effect_problems,
    effects,
    fast_settings,
    header,
    kept_dead_letters,
    make_database,
    make_events,
    new_group,
    private_backend,
    processed_ids,
    produce,
    running_consumer,
    wait_committed,
)
from tests.support.db import Backend
from tests.support.kafka import create_topics, delete_topics
from tests.support.ops import http_get, ops_port
from tests.support.waits import until

pytestmark = pytest.mark.integration

JSON_HEADERS = (("event_type", b"OrderPlaced"), ("content-type", b"application/json"))


@pytest.fixture(
    params=[
        ("psycopg_async", "postgres"),
        ("sqlalchemy_async", "sqlite"),
        ("sqlalchemy_sync", "mariadb"),
    ],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Backend]:
    """One database two consumer groups share, on each dialect."""
    adapter, dialect = request.param
    return adapter, private_backend(request, dialect, tmp_path)


@pytest.fixture(
    params=[
        ("psycopg_async", "postgres"),
        ("sqlalchemy_sync", "mariadb"),
        ("sqlalchemy_async", "mariadb"),
    ],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def keeping(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Backend]:
    """The database a consumer keeps the dead letters Kafka refuses in, on each dialect
    with a dead-letter table of its own statements, and on MariaDB through aiomysql too:
    the record's key and value are bytes, which aiomysql cannot bind under PyMySQL 1.2.3
    and later (aio-libs/aiomysql#1080; the project holds PyMySQL below it)."""
    adapter, dialect = request.param
    return adapter, private_backend(request, dialect, tmp_path)


async def consumer_ops_port(running: RunningConsumer) -> int:
    """The consumer's ops endpoint port, once it listens."""
    return await ops_port(running.consumer, alive=running.check_alive)


# --------------------------------------------------------------------------- purge


async def test_purge_removes_only_its_own_groups_rows_by_its_own_retention(
    shared: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """A group with a short retention purges its own old rows and leaves another group's
    rows of the same age alone: that group's replay window is its own."""
    adapter, backend = shared
    short, long = new_group(), new_group()
    db = make_database(adapter, backend)

    def still(event: object, session: object) -> None:
        return None

    mine = [str(uuid.uuid4()) for _ in range(3)]
    theirs = [str(uuid.uuid4()) for _ in range(3)]
    try:
        for event_id in mine:
            assert await db.apply(short, event_id, still, None)
        for event_id in theirs:
            assert await db.apply(long, event_id, still, None)
    finally:
        await db.close()
    for group in (short, long):  # both an hour old: past the short retention only
        backdate_processed(backend, group, 3600)

    topic = await topics("purge")
    events = make_events(2, keys=2, seed=3)
    layout = await produce(kafka_bootstrap, topic, events)
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, short, retention_s=60.0, purge_interval_s=0.2),
        make_database(adapter, backend),
    )
    app.handler(topic)(effect_handler(adapter, backend.dialect, short))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, short, layout, alive=running.check_alive)

        async def purged() -> bool:
            return not (processed_ids(backend, short) & set(mine))

        await until(purged, 30, "the short group's old rows purged", alive=running.check_alive)
    assert processed_ids(backend, short) == layout.event_ids
    assert processed_ids(backend, long) == set(theirs)


# --------------------------------------------------------------------------- poison


async def test_a_record_whose_decoding_raises_anything_is_dead_lettered_and_the_partition_moves_on(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """JSON nested deeper than the parser's recursion limit raises RecursionError, not
    ValueError: it is a poison record like any other, dead-lettered with the error in its
    headers, and the records after it are applied."""
    topic = await topics("nested")
    good = make_events(4, keys=4, seed=5)
    nested = b"[" * 200_000 + b"]" * 200_000
    records = [
        good[0],
        Outgoing("deep", nested, (("event_id", str(uuid.uuid4()).encode()), *JSON_HEADERS)),
        good[1],
        Outgoing("deep-obj", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, JSON_HEADERS),
        *good[2:],
    ]
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, missing_event_id="process"),
        make_database("psycopg_async", pg),
    )
    app.handler(topic, "OrderPlaced")(effect_handler("psycopg_async", "postgres", group))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
    dead = await dead_letters(kafka_bootstrap, topic)
    assert sorted((d.key or b"").decode() for d in dead) == ["deep", "deep-obj"]
    for record in dead:
        assert header(record, "dlt.error.type") == "PoisonRecord"
        assert header(record, "dlt.reason") == "undecodable"
        assert "RecursionError" in header(record, "dlt.error")
    assert effect_problems(effects(pg), {e.event_id for e in good if e.event_id}, group) == []
    assert running.stats.dead_lettered == 2


# --------------------------------------------------------------------------- dead letters


async def test_a_dead_letter_too_large_for_its_topic_is_kept_in_the_database_and_the_partition_moves_on(
    keeping: tuple[str, Backend], kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """The dead-letter topic's max.message.bytes is smaller than the record plus its
    dead-letter headers: the broker refuses it every time. The record is kept in
    consumer_dead_letters, counted, and the partition goes on; /healthz stays green."""
    adapter, backend = keeping
    topic = await topics("toolarge")
    await create_topics(kafka_bootstrap, [f"{topic}.DLT"], configs={"max.message.bytes": "2000"})
    good = make_events(3, keys=3, seed=9)
    big = b'{"blob":"' + b"x" * 2500 + b'"'  # not valid JSON: a poison record
    eid = str(uuid.uuid4())
    records = [
        good[0],
        Outgoing("big", big, (("event_id", eid.encode()), *JSON_HEADERS)),
        *good[1:],
    ]
    layout = await produce(kafka_bootstrap, topic, records)
    group = new_group()
    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, http_port=0), make_database(adapter, backend)
    )
    app.handler(topic)(effect_handler(adapter, backend.dialect, group))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, alive=running.check_alive)
        assert running.consumer.ops is not None
        health = await http_get(running.consumer.ops.port, "/healthz")
        metrics = (await http_get(running.consumer.ops.port, "/metrics")).body
    assert health.status == 200
    kept = kept_dead_letters(backend)
    assert [(k.group, k.topic, k.partition, k.value_bytes) for k in kept] == [
        (group, topic, 0, len(big))
    ]
    assert kept[0].offset == "1"
    assert kept[0].error_type == "PoisonRecord"
    assert "MessageSizeTooLarge" in kept[0].refused
    assert ["event_id", eid] in kept[0].headers
    assert running.stats.dead_letters_kept == 1
    assert (
        f'outbox_consumer_dead_letters_kept_total{{reason="too_large",topic="{topic}"}} 1.0'
        in metrics
    )
    assert await dead_letters(kafka_bootstrap, topic) == []
    assert effect_problems(effects(backend), {e.event_id for e in good if e.event_id}, group) == []


async def test_a_dead_letter_topic_with_an_invalid_name_keeps_the_record_in_the_database(
    pg: Backend, kafka_bootstrap: str
) -> None:
    """A 248-character topic is valid; its `<topic>.DLT` (252) is not. The client would only
    time out on it, again and again: the record is kept in the database at once."""
    topic = "n" * 240 + uuid.uuid4().hex[:8]
    await create_topics(kafka_bootstrap, [topic])
    try:
        records = [
            Outgoing("bad", b"{", (("event_id", str(uuid.uuid4()).encode()), *JSON_HEADERS)),
            *make_events(2, keys=2, seed=4),
        ]
        layout = await produce(kafka_bootstrap, topic, records)
        group = new_group()
        app = ConsumerApp(fast_settings(kafka_bootstrap, group), make_database("psycopg_async", pg))
        app.handler(topic)(effect_handler("psycopg_async", "postgres", group))
        async with running_consumer(app) as running:
            await wait_committed(
                kafka_bootstrap, group, layout, timeout=30, alive=running.check_alive
            )
        kept = kept_dead_letters(pg)
        assert [(k.topic, k.offset, k.error_type) for k in kept] == [(topic, "0", "PoisonRecord")]
        assert "not a valid Kafka topic name" in kept[0].refused
        assert running.stats.dead_letters_kept == 1
    finally:
        await delete_topics(kafka_bootstrap, [topic])


async def test_healthz_fails_while_a_partition_is_stuck_on_a_dead_letter_topic_that_refuses(
    pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """The dead-letter topic does not exist and is not created (the broker does not create
    topics either): the broker answers every send with an error a retry may get past, so
    the record is retried and its partition waits. Past stall_after_s, /healthz says the
    partition is stuck, though the loop itself still ticks."""
    topic = await topics("stuck")
    bad = Outgoing("bad", b"{", (("event_id", str(uuid.uuid4()).encode()), *JSON_HEADERS))
    await produce(kafka_bootstrap, topic, [bad])
    group = new_group()
    settings = fast_settings(
        kafka_bootstrap,
        group,
        http_port=0,
        stall_after_s=3.0,
        create_dead_letter_topics=False,
    )
    app = ConsumerApp(settings, make_database("psycopg_async", pg))
    app.handler(topic)(effect_handler("psycopg_async", "postgres", group))
    async with running_consumer(app) as running:
        port = await consumer_ops_port(running)

        async def stuck() -> Any:
            response = await http_get(port, "/healthz")
            return response if "dead-letter send failing" in response.body else None

        # Each send waits for the topic's metadata (the client's request timeout, 40 s)
        # before the broker's answer fails it: the partition is stuck from the first one.
        response = await until(stuck, 150, "/healthz to call it stuck", alive=running.check_alive)
        assert response.status == 503
        assert f"{topic}[0]" in response.body
        assert running.stats.dead_lettered == 0


# --------------------------------------------------------------------------- handler failures


@pytest.mark.parametrize("raised", [TimeoutError, ConnectionError])
async def test_a_handlers_own_timeout_or_connection_error_counts_against_its_attempts(
    raised: type[Exception], pg: Backend, kafka_bootstrap: str, topics: TopicFactory
) -> None:
    """A handler whose own call times out (or is refused) fails: after max_attempts the
    record is dead-lettered, instead of being retried forever as if the database were
    away."""
    topic = await topics("ownerr")
    events = make_events(3, keys=3, seed=2)
    layout = await produce(kafka_bootstrap, topic, events)
    doomed = events[1].event_id
    group = new_group()

    def before(event: ConsumedEvent) -> None:
        if str(event.event_id) == doomed:
            raise raised("the payment service did not answer")

    app = ConsumerApp(
        fast_settings(kafka_bootstrap, group, max_attempts=2, batch=False),
        make_database("psycopg_async", pg),
    )
    app.handler(topic)(effect_handler("psycopg_async", "postgres", group, before_write=before))
    async with running_consumer(app) as running:
        await wait_committed(kafka_bootstrap, group, layout, timeout=30, alive=running.check_alive)
    dead = await dead_letters(kafka_bootstrap, topic)
    assert [header(d, "dlt.error.type") for d in dead] == [raised.__name__]
    assert [header(d, "dlt.reason") for d in dead] == ["handler_failed"]
    assert running.stats.handler_failures == 2
    assert running.stats.transient_retries == 0
    assert doomed not in processed_ids(pg, group)
