"""examples/fastapi_orders as it runs: uvicorn serving the app on loopback, the relay beside
it, real Postgres (asyncpg) and Kafka. Orders posted to the API are written with their
event in one transaction; the relay publishes them; the consumer in the app's lifespan
books one shipment per order even when every event is delivered twice; SIGTERM, owned by
uvicorn, ends the lifespan and the consumer with it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from outbox_core.queries import parse_blocks
from tests.conftest import TopicFactory
from tests.support.consumers import (
    Outgoing,
    new_group,
    prepare,
    processed_ids,
    produce,
    wait_committed,
)
from tests.support.db import Backend, postgres_backend
from tests.support.kafka import read_topic
from tests.support.processes import ChildProcess
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.waits import until

pytestmark = pytest.mark.integration

SQL = parse_blocks(
    (Path(__file__).parents[1] / "support" / "sql" / "examples_postgres.sql").read_text()
)
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _rows(backend: Backend, name: str) -> list[tuple[Any, ...]]:
    conn = backend.connect()
    try:
        return [tuple(r) for r in conn.execute(SQL[name]).fetchall()]
    finally:
        conn.close()


class Server:
    def __init__(self, proc: ChildProcess) -> None:
        self.proc = proc
        self.base = ""

    async def started(self) -> str:
        async def listening() -> str | None:
            if not self.proc.running:
                raise AssertionError(f"uvicorn exited:\n{self.proc.log()[-3000:]}")
            found = _LISTENING.search(self.proc.log())
            return found.group(1) if found else None

        port = await until(listening, 60, "uvicorn listening")
        self.base = f"http://127.0.0.1:{port}"
        return self.base


@pytest.fixture
async def server(
    pg_url: str, kafka_bootstrap: str, tmp_path: Path, new_topic: TopicFactory
) -> AsyncIterator[tuple[Server, Backend, str, str]]:
    backend = prepare(postgres_backend(pg_url))
    topic = await new_topic("fastapi-orders", partitions=2)
    group = new_group()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")},
        "DATABASE_URL": pg_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "ORDERS_TOPIC": topic,
        "CONSUMER_GROUP": group,
    }
    args = [
        "-m",
        "uvicorn",
        "examples.fastapi_orders.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    proc = ChildProcess(args, env, tmp_path / "uvicorn.log", name="fastapi")
    try:
        yield Server(proc), backend, topic, group
    finally:
        if proc.running:
            proc.kill()


def _order(**over: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "customer": "ada", "total_cents": 1250, **over}


HOSTILE = [
    ("negative-total", _order(total_cents=-5)),
    ("zero-total", _order(total_cents=0)),
    ("empty-customer", _order(customer="")),
    ("oversized-customer", _order(customer="x" * 10_000)),
    ("bad-id", _order(id="not-a-uuid")),
    ("missing-total", {"id": str(uuid.uuid4()), "customer": "ada"}),
    ("total-not-int", _order(total_cents="lots")),
]


async def test_orders_emit_in_their_transaction_and_the_lifespan_consumer_ships_each_once(
    server: tuple[Server, Backend, str, str], kafka_bootstrap: str
) -> None:
    srv, backend, topic, group = server
    base = await srv.started()
    async with (
        running_relay(relay_settings(backend, kafka_bootstrap)),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):

        async def ready() -> bool:
            return (await client.get("/healthz")).status_code == 200

        await until(ready, 60, "the lifespan consumer holding its partitions")

        placed = [_order(customer=f"c{i}", total_cents=100 + i) for i in range(20)]
        event_ids = set()
        for order in placed:
            response = await client.post("/orders", json=order)
            assert response.status_code == 201, response.text
            event_ids.add(response.json()["event_id"])
        # The same order again: its INSERT fails at commit, after the event's, and the
        # transaction takes the event back with it.
        again = await client.post("/orders", json={**placed[0], "customer": "mallory"})
        assert again.status_code == 409, again.text
        for case, body in HOSTILE:
            refused = await client.post("/orders", json=body)
            assert refused.status_code == 422, (case, refused.text)
        malformed = await client.post(
            "/orders", content=b'{"id": ', headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 422

        async def all_shipped() -> bool:
            for order in placed:
                got = (await client.get(f"/orders/{order['id']}")).json()
                if not got["shipped"]:
                    return False
            return True

        await until(all_shipped, 60, "a shipment for every order")
        await wait_drained(backend, 30)

        # Every event delivered a second time (a relay that lost its marks publishes again):
        # the consumer's dedup skips them all.
        published = await read_topic(kafka_bootstrap, topic)
        assert len(published) == len(placed)
        copies = [
            Outgoing(
                None if r.key is None else r.key.decode(),
                r.value,
                r.headers,
                r.partition,
                (r.header("event_id") or b"").decode(),
            )
            for r in published
        ]
        layout = await produce(kafka_bootstrap, topic, copies)
        await wait_committed(kafka_bootstrap, group, layout, timeout=60)
        assert (await client.get(f"/orders/{uuid.uuid4()}")).status_code == 404

    assert {eid for (eid,) in _rows(backend, "example_outbox_event_ids")} == event_ids
    assert {oid for (oid,) in _rows(backend, "example_order_ids")} == {o["id"] for o in placed}
    shipments = dict(_rows(backend, "example_shipments_per_order"))
    assert shipments == {o["id"]: 1 for o in placed}
    assert processed_ids(backend, group) == event_ids

    # uvicorn owns SIGTERM: it ends the lifespan, which stops the consumer and waits for it
    # (a consumer failing there would be "Application shutdown failed"), then re-raises the
    # signal it caught, so the process ends by SIGTERM after a clean shutdown.
    srv.proc.signal(signal.SIGTERM)
    code = await asyncio.to_thread(srv.proc.wait, 60)
    log = srv.proc.log()
    assert code == -signal.SIGTERM, log[-3000:]
    assert "Application shutdown complete" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
