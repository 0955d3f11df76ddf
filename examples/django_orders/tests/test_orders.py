"""The example against real Postgres and Kafka: emit on Django's own connection inside
transaction.atomic(), and DjangoSync's handlers writing through the ORM in the transaction
that records each event."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models.signals import post_save

from consumer_lib import Consumer, DjangoSync, consumer_in_background
from examples.django_orders.orders.consumers import build_consumers
from examples.django_orders.orders.models import Order, Shipment
from examples.django_orders.orders.services import outbox, place_order, record_placed
from outbox_core.queries import parse_blocks
from producer_lib import Event, IdempotencyConflict, NoTransaction, UnsupportedConnection

ROOT = Path(__file__).resolve().parents[3]
SQL = parse_blocks((Path(__file__).parent / "queries.sql").read_text(), "queries.sql")


def rows(name: str, **params: Any) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(SQL[name], params)
        return [tuple(r) for r in cur.fetchall()]


def events_of(order: Order) -> list[tuple[Any, ...]]:
    return rows("outbox_events_of_key", topic=settings.ORDERS_TOPIC, key=str(order.pk))


def test_django_runs_on_the_driver_asked_for() -> None:
    wanted = os.environ.get("ORDERS_DB_DRIVER", "psycopg")
    assert getattr(connection, "Database").__name__ == wanted  # noqa: B009 - not in the stubs
    if wanted == "psycopg2":
        with pytest.raises(ImportError):
            import psycopg  # noqa: F401


def test_an_order_and_its_event_commit_together() -> None:
    order = place_order("ada", 1250)
    [(event_id, event_type, payload)] = events_of(order)
    assert event_type == "OrderPlaced"
    assert json.loads(bytes(payload)) == {"order_id": order.pk, "total_cents": 1250}
    assert uuid.UUID(event_id)


def _place_then_fail(customer: str, placed: list[Order]) -> None:
    """An order and its event in a transaction (or savepoint) that then fails."""
    with transaction.atomic():
        order = Order.objects.create(customer=customer, total_cents=10)
        placed.append(order)
        record_placed(order)
        raise RuntimeError("payment declined")


def test_a_failed_transaction_takes_the_event_back() -> None:
    before, placed = Order.objects.count(), list[Order]()
    with pytest.raises(RuntimeError, match="declined"):
        _place_then_fail("bob", placed)
    assert Order.objects.count() == before
    assert events_of(placed[0]) == []


def test_a_rolled_back_savepoint_takes_only_its_own_event() -> None:
    dropped = list[Order]()
    with transaction.atomic():
        kept = Order.objects.create(customer="carol", total_cents=20)
        record_placed(kept)
        with pytest.raises(RuntimeError, match="declined"):
            _place_then_fail("dave", dropped)
    assert len(events_of(kept)) == 1
    assert events_of(dropped[0]) == []
    assert not Order.objects.filter(pk=dropped[0].pk).exists()


def test_emit_outside_atomic_is_refused_before_any_write() -> None:
    order = Order.objects.create(customer="erin", total_cents=40)  # autocommit: committed
    with pytest.raises(NoTransaction, match=r"transaction\.atomic"):
        record_placed(order)
    assert events_of(order) == []


def test_batches_idempotency_keys_and_named_connections() -> None:
    with transaction.atomic():
        order = Order.objects.create(customer="frank", total_cents=50)
        first = record_placed(order, idempotency_key=f"order-{order.pk}")
        assert record_placed(order, idempotency_key=f"order-{order.pk}") == first
        outbox.emit_batch(
            connections["default"],
            [Event(settings.ORDERS_TOPIC, str(order.pk), "OrderNoted", {"n": n}) for n in range(3)],
        )
    assert [t for _, t, _ in events_of(order)] == ["OrderPlaced"] + ["OrderNoted"] * 3
    order.total_cents = 51
    with pytest.raises(IdempotencyConflict), transaction.atomic():
        record_placed(order, idempotency_key=f"order-{order.pk}")


async def _ensure_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def _republish(bootstrap: str, topic: str, count: int) -> None:
    """Every record on the topic once more, as a relay that lost its marks would."""
    reader = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await reader.start()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < count and time.monotonic() < deadline:
            batches = await reader.getmany(timeout_ms=1000)
            for tp, records in batches.items():
                for r in records:
                    await producer.send_and_wait(
                        topic, r.value, key=r.key, headers=list(r.headers), partition=tp.partition
                    )
                    seen += 1
        assert seen >= count, f"read {seen} of {count} records"
    finally:
        await producer.stop()
        await reader.stop()


async def _until(check: Any, timeout: float, what: str, consumer: Consumer) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; stats {consumer.stats}")
        await asyncio.sleep(0.2)


@pytest.mark.usefixtures("relay")
async def test_the_consumer_books_one_shipment_per_order_through_the_orm() -> None:
    bootstrap, topic = settings.KAFKA_BOOTSTRAP_SERVERS, settings.ORDERS_TOPIC
    await _ensure_topic(bootstrap, topic)
    group = f"{settings.SHIPPING_GROUP}-{uuid.uuid4().hex[:8]}"
    settings.SHIPPING_GROUP = group
    orders = await asyncio.to_thread(lambda: [place_order(f"c{i}", 100 + i) for i in range(30)])
    placed = {o.pk for o in orders}
    # The first attempt for one order fails after the ORM wrote its shipment: the
    # transaction rolls the shipment back with the event's processed_events row, and the
    # retry books it once.
    # Another's first attempt loses its connection mid-transaction (the server ends it):
    # a transient error, retried on a fresh connection without counting an attempt.
    unlucky, failures = orders[7].pk, list[int]()
    cut, cuts = orders[12].pk, list[int]()

    def fail_once(sender: type[Shipment], instance: Shipment, **kwargs: Any) -> None:
        if instance.order_id == unlucky and not failures:
            failures.append(instance.pk)
            raise RuntimeError("the carrier's API timed out")
        if instance.order_id == cut and not cuts:
            cuts.append(instance.pk)
            rows("backend_terminate_self")

    post_save.connect(fail_once, sender=Shipment)
    try:
        app = build_consumers(backoff_base_s=0.05, backoff_max_s=0.5, max_attempts=3)
        async with consumer_in_background(app) as consumer:

            def shipped() -> bool:
                return (
                    set(
                        Shipment.objects.filter(order_id__in=placed).values_list(
                            "order_id", flat=True
                        )
                    )
                    == placed
                )

            await _until(shipped, 90, "a shipment for every order", consumer)
            counted = await asyncio.to_thread(rows, "outbox_events_of_topic", topic=topic)
            published, handled = (int(n) for n in counted[0])
            await _republish(bootstrap, topic, published)

            def duplicates_seen() -> bool:
                return int(consumer.stats.duplicates) >= handled

            await _until(duplicates_seen, 90, "every copy skipped", consumer)
    finally:
        post_save.disconnect(fail_once, sender=Shipment)

    assert failures, "the failing attempt never ran"
    assert cuts, "the cut attempt never ran"
    assert consumer.stats.transient_retries >= 1
    per_order = await asyncio.to_thread(
        lambda: {o: Shipment.objects.filter(order_id=o).count() for o in placed}
    )
    assert per_order == {o: 1 for o in placed}
    recorded = await asyncio.to_thread(rows, "processed_events_of_group", consumer_group=group)
    assert len(recorded) == handled  # other event types have no handler: skipped
    assert consumer.stats.dead_lettered == 0


def test_other_backends_and_unknown_aliases_are_refused() -> None:
    from django.db.backends.sqlite3.base import DatabaseWrapper
    from django.utils.connection import ConnectionDoesNotExist

    embedded = DatabaseWrapper({**connection.settings_dict, "NAME": ":memory:"}, alias="embedded")
    with pytest.raises(UnsupportedConnection, match="sqlite"):
        outbox.emit(embedded, topic="orders", key="k", event_type="E", payload={})
    with pytest.raises(ConnectionDoesNotExist):
        DjangoSync("no-such-alias")


def _start_command(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`manage.py <args>` as a child process from the repository root, output to log."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.django_orders.manage", *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.usefixtures("relay")
async def test_the_management_command_ships_and_stops_on_sigterm(tmp_path: Path) -> None:
    group = f"{settings.SHIPPING_GROUP}-command-{uuid.uuid4().hex[:8]}"
    order = await asyncio.to_thread(place_order, "grace", 60)
    env = {**os.environ, "CONSUMER_GROUP": group}
    log = tmp_path / "run_shipping.log"
    proc = _start_command(["run_shipping"], env, log)
    try:
        deadline = time.monotonic() + 90
        while not await asyncio.to_thread(
            lambda: (
                str(events_of(order)[0][0])
                in {e for (e,) in rows("processed_events_of_group", consumer_group=group)}
            )
        ):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            await asyncio.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, log.read_text()[-3000:]
    assert "shipping consumer stopped" in log.read_text()


def test_deliver_after_and_tenant_on_djangos_connection() -> None:
    with transaction.atomic():
        order = Order.objects.create(customer="heidi", total_cents=70)
        outbox.emit(
            connection,
            topic=settings.ORDERS_TOPIC,
            key=str(order.pk),
            event_type="OrderReminder",
            payload={"order_id": order.pk},
            deliver_after=dt.timedelta(minutes=5),
            tenant="acme",
        )
        outbox.emit_batch(
            connection,
            [Event(settings.ORDERS_TOPIC, str(order.pk), "OrderNoted", {}, tenant="globex")],
        )
    [(tenant, delay), (batch_tenant, batch_delay)] = rows(
        "outbox_delivery_of_key", topic=settings.ORDERS_TOPIC, key=str(order.pk)
    )
    assert (tenant, batch_tenant) == ("acme", "globex")
    assert dt.timedelta(minutes=5) <= delay < dt.timedelta(minutes=5, seconds=5)
    assert batch_delay < dt.timedelta(seconds=5)


async def test_django_sync_dedups_and_purges_only_old_rows() -> None:
    database = DjangoSync()
    group = f"purge-{uuid.uuid4().hex[:8]}"

    def still(event: object, connection: object) -> None:
        return None

    try:
        ids = [str(uuid.uuid4()) for _ in range(3)]
        for event_id in ids:
            assert await database.apply(group, event_id, still, None)
        assert not await database.apply(group, ids[0], still, None)  # a duplicate
        assert await database.purge(group, 3600.0, 1000) == 0  # nothing an hour old
        await asyncio.sleep(1.5)
        assert await database.purge(group, 1.0, 1000) == 3
        recorded = await asyncio.to_thread(rows, "processed_events_of_group", consumer_group=group)
        assert recorded == []
    finally:
        await database.close()
