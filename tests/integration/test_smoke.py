"""The chain is real: Postgres commits a row, Kafka carries it, a consumer reads it back."""

from __future__ import annotations

import asyncio
import json

import psycopg

from scripts.smoke import round_trip
from tests.conftest import TopicFactory
from tests.support.kafka import read_topic


async def test_row_goes_through_postgres_and_kafka(
    pg_url: str, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("smoke")
    result = await asyncio.to_thread(round_trip, pg_url, kafka_bootstrap, topic)

    assert result.received == result.sent
    assert json.loads(result.sent)["order_id"] == result.row_id
    with psycopg.connect(pg_url) as conn:
        count = conn.execute("SELECT count(*) FROM smoke_orders").fetchone()
    assert count == (1,)
    records = await read_topic(kafka_bootstrap, topic)
    assert [(r.key, r.value) for r in records] == [(result.row_id.encode(), result.sent)]


def test_each_test_gets_its_own_database(pg_url: str, postgres_admin: str) -> None:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert row is not None
    assert row[0].startswith("t_")
    assert tables == (0,)
