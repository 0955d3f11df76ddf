"""Least privilege: each part of the outbox works with only its own grants.

On Postgres and on MariaDB, a login per part is created on a private database and given
exactly its block of migrations/<dialect>/grants.sql (tests/support/accounts.py runs the
blocks one by one, as `psql -v ... -f grants.sql` or the mariadb client would); then
producer_lib emits as the producer, the relay (in this process) publishes to Kafka and
settles as the relay, the operator commands run as the relay, and consumer_lib applies the
events as the consumer. Probes show what each login cannot do.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from consumer_lib import (
    ConsumedEvent,
    ConsumerApp,
    ConsumerSettings,
    Database,
    PsycopgAsync,
    SqlAlchemyAsync,
)
from outbox_core.kafka_security import KafkaSecurity
from producer_lib import Event, Outbox
from relay.ops import admin
from tests.conftest import TopicFactory
from tests.support import mariadb
from tests.support.accounts import part_logins
from tests.support.consumers import processed_ids, running_consumer
from tests.support.db import Backend, mariadb_backend, postgres_backend
from tests.support.kafka import read_topic
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.transactions import sync_tx
from tests.support.waits import until

pytestmark = pytest.mark.integration

PARTS = ("producer", "relay", "consumer")


@pytest.fixture(params=["postgres", "mariadb"])
def owned(request: pytest.FixtureRequest) -> tuple[Backend, str]:
    """A private database as its owner's backend, and a URL that may create logins."""
    if request.param == "postgres":
        pg_url = request.getfixturevalue("pg_url")
        return postgres_backend(pg_url), request.getfixturevalue("postgres_admin")
    return mariadb_backend(request.getfixturevalue("mariadb_url")), mariadb.mariadb_admin_url()


def backend_as(owner: Backend, url: str) -> Backend:
    return Backend(owner.dialect, url, url)


def consumer_database(owner: Backend, url: str) -> Database:
    if owner.dialect == "postgres":
        return PsycopgAsync(url)
    from sqlalchemy.ext.asyncio import create_async_engine

    # READ COMMITTED, as docs/consumer.md advises: at the server's REPEATABLE READ the two
    # partitions' dedup inserts can deadlock on gap locks, a retried transient failure
    # this test would take for a refusal.
    return SqlAlchemyAsync(
        create_async_engine(
            mariadb.sqlalchemy_url(url, "aiomysql"), isolation_level="READ COMMITTED"
        )
    )


async def test_each_part_runs_with_only_its_own_grants(
    owned: tuple[Backend, str],
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    owner, admin_url = owned
    owner.migrate()  # schema changes need the owner; no part does any at run time
    topic = await new_topic("leastpriv", partitions=2)
    with part_logins(owner.dialect, admin_url, owner.url, PARTS) as logins:
        url = logins.urls

        # The producer: events in its own transactions, idempotency keys remembered.
        producer = backend_as(owner, url["producer"])
        outbox = Outbox()
        with sync_tx(producer, "driver") as conn:
            emitted = outbox.emit_batch(
                conn, [Event(topic, f"k-{i % 5}", "OrderPlaced", {"i": i}) for i in range(20)]
            )
        keyed = []
        for _ in range(2):  # the second emit finds the key and writes nothing
            with sync_tx(producer, "driver") as conn:
                keyed.append(
                    outbox.emit(
                        conn,
                        topic=topic,
                        key="k-idem",
                        event_type="OrderPlaced",
                        payload={"request": 1},
                        idempotency_key="request-1",
                    )
                )
        assert keyed[0] == keyed[1]
        with sync_tx(producer, "driver") as conn:  # too large for the relay: parked
            outbox.emit(
                conn, topic=topic, key="k-big", event_type="Big", payload={"blob": "x" * 2000}
            )
        assert owner.scalar("idempotency_count") == 1

        # The relay: leases, membership, claims, settles (published and parked), purges.
        relay_db = backend_as(owner, url["relay"])
        settings = relay_settings(
            relay_db,
            kafka_bootstrap,
            http_port=0,
            kafka_max_request_size=1024,
            idempotency_retention_s=0.0,  # the purge deletes the key at once
            purge_interval_s=0.2,
            gauges_interval_s=0.2,  # the backlog gauges' statements, again and again
        )
        async with running_relay(settings) as relay:
            await wait_drained(owner, timeout=60, parked_ok=True)

            async def key_purged() -> bool:
                return bool(owner.scalar("idempotency_count") == 0)

            await until(key_purged, 30, "the relay's idempotency purge")
            # The operator commands need nothing more than the relay's grants.
            status = admin.status(url["relay"])
            [parked] = admin.parked_list(url["relay"], admin.RowFilter())
            assert (status.pending, status.parked, len(status.leases)) == (0, 1, 16)
            assert parked.key == "k-big"
            retried = admin.parked_retry(url["relay"], admin.RowFilter(ids=[parked.id]))
            assert retried.ids == [parked.id]

            async def parked_again() -> bool:
                return relay.stats.parked == 2

            await until(parked_again, 30, "the retried row parked again")
        assert relay.stats.published == 21
        # Shutdown released every lease and left the membership (errors there are silent).
        assert [row[1] for row in owner.fetch("lease_rows")] == [None] * 16
        assert admin.status(owner.url).replicas == []
        discarded = admin.parked_discard(url["relay"], admin.RowFilter(key="k-big"))
        assert discarded.ids == [parked.id]
        delivered = {
            (r.header("event_id") or b"").decode() for r in await read_topic(kafka_bootstrap, topic)
        }
        assert delivered == {str(e) for e in [*emitted, keyed[0]]}

        # The consumer: dedup rows in its own transactions, purge of old ones.
        group = f"g-{uuid.uuid4().hex[:8]}"
        seen: list[str] = []

        async def handler(event: ConsumedEvent, conn: object) -> None:
            seen.append(str(event.event_id))

        app = ConsumerApp(
            ConsumerSettings(
                security=KafkaSecurity.plaintext(),
                bootstrap_servers=kafka_bootstrap,
                group_id=group,
                create_dead_letter_topics=False,
                purge_interval_s=0.2,
            ),
            consumer_database(owner, url["consumer"]),
        )
        app.handler(topic)(handler)
        async with running_consumer(app) as running:

            async def all_applied() -> bool:
                return len(seen) == len(delivered)

            await until(all_applied, 60, "every event applied", alive=running.check_alive)
        assert running.stats.processed == 21
        assert processed_ids(owner, group) == delivered

        # What each login cannot do.
        denied, probe = logins.denied, logins.probe
        assert probe("producer", "probe_events_delete") == denied
        assert probe("producer", "probe_events_read") == denied
        assert probe("producer", "probe_processed_read") == denied
        assert probe("producer", "probe_create_table") == denied
        assert probe("relay", "probe_events_update") is None  # its own work
        assert probe("relay", "probe_processed_read") == denied
        assert probe("relay", "probe_settings_update") == denied
        assert probe("relay", "probe_create_table") == denied
        assert probe("relay", "probe_events_drop") == denied
        assert probe("consumer", "probe_processed_read") is None  # its own table
        assert probe("consumer", "probe_events_read") == denied
        assert probe("consumer", "probe_leases_update") == denied
        assert probe("consumer", "probe_create_table") == denied

    # No part hit a refusal that its loops retried or logged and went on.
    problems = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING
        and r.name.split(".")[0] in ("relay", "consumer_lib")
        and r.getMessage() != "rows parked"
    ]
    assert problems == []


async def test_mariadb_grants_name_an_account_whatever_its_name_holds(mariadb_url: str) -> None:
    """grants.sql builds each GRANT from the session's account names: quotes, a backtick
    and a statement's end in a name stay inside the name."""
    owner = mariadb_backend(mariadb_url)
    owner.migrate()
    tail = "'`\"; DROP TABLE outbox_events; -- x"
    with part_logins(
        "mariadb", mariadb.mariadb_admin_url(), owner.url, ["consumer"], name_tail=tail
    ) as logins:
        assert logins.probe("consumer", "probe_processed_read") is None
        assert logins.probe("consumer", "probe_events_read") == logins.denied
    assert owner.scalar("outbox_count") == 0  # the table is still there
