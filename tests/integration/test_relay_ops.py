"""Operating the relay: /metrics, /healthz and /readyz of a running relay, and the admin CLI
(`python -m relay.cli status|parked|replay`) as a process, on Postgres and SQLite.

Relays run in this process with http_port=0 (RelayService.ops.port is the bound port), on
real Kafka; parked rows are made for real (records larger than kafka_max_request_size) or
with a test-only statement (tests/support/sql/ops_<dialect>.sql) when a test needs rows
with given errors and ages.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import TopicFactory
from tests.support.db import Backend
from tests.support.kafka import read_topic
from tests.support.ops import (
    Metrics,
    backdate,
    cli_async,
    cli_on_terminal,
    http_get,
    ops_port,
    output,
    park,
    rows,
    scrape,
)
from tests.support.relay import relay_settings, running_relay, wait_drained
from tests.support.stores import emit, event
from tests.support.waits import until

pytestmark = pytest.mark.integration

BIG = {"blob": "x" * 2000}  # larger than kafka_max_request_size=1024: parked at once


def _total(m: Metrics, name: str) -> float:
    value = m.value(name)
    assert value is not None, f"{name} not in the scrape:\n{m.text}"
    return value


# --------------------------------------------------------------------------- /metrics


async def test_metrics_probes_and_gauges_of_a_working_relay(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    orders = await new_topic("orders", partitions=2)
    refunds = await new_topic("refunds")
    emit(backend, *(event(f"o-{i % 6}", topic=orders, payload={"i": i}) for i in range(30)))
    emit(backend, *(event(f"r-{i % 3}", topic=refunds, payload={"i": i}) for i in range(12)))
    emit(
        backend,
        event("big-1", topic=orders, payload=BIG),
        event("big-2", topic=orders, payload=BIG),
    )
    # Pending but not due for an hour, and created an hour ago: the oldest pending row.
    [later] = emit(backend, event("later", topic=refunds, deliver_after=timedelta(hours=1)))
    backdate(backend, [later], 3600)

    settings = relay_settings(
        backend, kafka_bootstrap, http_port=0, gauges_interval_s=0.1, kafka_max_request_size=1024
    )
    async with running_relay(settings) as relay:
        port = await ops_port(relay)

        async def settled() -> Metrics | None:
            m = await scrape(port)
            done = (
                m.value("outbox_relay_pending_rows") == 1
                and m.value("outbox_relay_parked_rows") == 2
                and relay.stats.published == 42
            )
            return m if done else None

        m = await until(settled, 60, "42 published, 2 parked, 1 pending in the gauges")
        healthz = await http_get(port, "/healthz")
        readyz = await http_get(port, "/readyz")
        missing = await http_get(port, "/nope")

    # Published by (row) topic: exactly what was emitted, nothing twice.
    assert m.by_label("outbox_relay_events_published_total", "topic") == {orders: 30, refunds: 12}
    # Failures by reason: a class, never the per-row text (unbounded label values).
    assert m.by_label("outbox_relay_publish_failures_total", "reason") == {"RecordTooLarge": 2}
    assert _total(m, "outbox_relay_events_parked_total") == 2
    # Every claimed row was published, parked or held back for a later cycle (its key's
    # rows needed a second record batch of this 1 KiB limit): none published twice.
    held_back = _total(m, "outbox_relay_rows_held_back_total")
    assert held_back == relay.stats.held_back
    assert _total(m, "outbox_relay_batch_rows_sum") == 44 + held_back
    assert 1 <= _total(m, "outbox_relay_batch_rows_count") <= 44
    # Commit-to-ack latency: one observation per event published, each well under a minute.
    assert _total(m, "outbox_relay_commit_to_ack_seconds_count") == 42
    assert m.value("outbox_relay_commit_to_ack_seconds_bucket", le="60.0") == 42
    assert 0 < _total(m, "outbox_relay_commit_to_ack_seconds_sum") < 42 * 60
    # One replica holds every shard; nothing was taken over or lost.
    assert _total(m, "outbox_relay_leases_held") == 16
    assert _total(m, "outbox_relay_replicas_live") == 1
    assert _total(m, "outbox_relay_lease_takeovers_total") == 0
    assert _total(m, "outbox_relay_lease_losses_total") == 0
    assert _total(m, "outbox_relay_producer_recreations_total") == 0
    # Backlog gauges after a refresh: the delayed row is pending, an hour old.
    assert 3600 <= _total(m, "outbox_relay_oldest_pending_age_seconds") < 3600 + 600
    # Probes and routing.
    assert (healthz.status, healthz.body) == (200, "ok\n")
    assert (readyz.status, readyz.body) == (200, "ok: 16 shard(s) held\n")
    assert missing.status == 404


async def test_readyz_names_kafka_while_it_is_unreachable_and_scrapes_never_query(
    backend: Backend,
) -> None:
    emit(backend, *(event(f"k-{i}") for i in range(3)))
    # Nothing listens on port 1. The gauges refresh once at start, then not for an hour.
    settings = relay_settings(
        backend, "127.0.0.1:1", http_port=0, gauges_interval_s=3600.0, shutdown_grace_s=1.0
    )
    async with running_relay(settings) as relay:
        port = await ops_port(relay)

        async def first_refresh() -> Metrics | None:
            m = await scrape(port)
            return m if m.value("outbox_relay_pending_rows") == 3 else None

        m = await until(first_refresh, 30, "the backlog gauges while Kafka is away")
        assert _total(m, "outbox_relay_oldest_pending_age_seconds") > 0
        readyz = await http_get(port, "/readyz")
        healthz = await http_get(port, "/healthz")
        # More rows; a scrape reports the last refresh, it does not count them.
        emit(backend, event("k-3"), event("k-4"))
        again = [await scrape(port) for _ in range(3)]
        assert relay.stats.published == 0

    assert readyz.status == 503
    assert "kafka: unreachable" in readyz.body, readyz.body
    assert healthz.status == 200, healthz.body  # alive: retrying is not being stuck
    assert [s.value("outbox_relay_pending_rows") for s in again] == [3, 3, 3]
    assert _total(again[-1], "outbox_relay_leases_held") == 0


# --------------------------------------------------------------------------- admin CLI


def _db(backend: Backend) -> dict[str, str]:
    return {"OUTBOX_DATABASE_URL": backend.url}


def _ids(done: Any) -> set[int]:
    assert done.returncode == 0, output(done)
    return {int(r["id"]) for r in json.loads(done.stdout)}


async def test_admin_cli_status_and_parked_list_retry_discard(backend: Backend) -> None:
    o1, o2, o3, r1, r2, p1 = emit(
        backend,
        event("k-1", topic="orders"),
        event("k-2", topic="orders"),
        event("k-3", topic="orders"),
        event("k-1", topic="refunds"),
        event("k-4", topic="refunds"),
        event("k-5", topic="orders"),
    )
    park(backend, [o1, o2], "KafkaTimeoutError: the broker went away")
    park(backend, [o3, r1, r2], "RecordTooLarge: record of 2000 bytes exceeds 1024")
    backdate(backend, [o1, r2], 7200)
    env = _db(backend)
    # Parked: o1 (orders, k-1, timeout, 2h old), o2 (orders, k-2, timeout),
    # o3 (orders, k-3, too large), r1 (refunds, k-1, too large), r2 (refunds, k-4, too large,
    # 2h old). Pending: p1. Each filtered listing pairs two criteria so that either one
    # ignored would show in the result.
    status, status_json, every, topic_age, key_error, table = await asyncio.gather(
        cli_async("status", env=env),
        cli_async("status", "--json", env=env),
        cli_async("parked", "list", "--json", env=env),
        cli_async("parked", "list", "--topic", "refunds", "--older-than", "1h", "--json", env=env),
        cli_async("parked", "list", "--key", "k-1", "--error", "Timeout", "--json", env=env),
        cli_async("parked", "list", "--id", str(o2), "--id", str(p1), env=env),
    )
    assert status.returncode == 0, output(status)
    assert "pending: 1 " in status.stdout, status.stdout
    assert "parked: 5" in status.stdout, status.stdout
    assert "shards: 16" in status.stdout
    state = json.loads(status_json.stdout)
    assert (state["pending"], state["parked"], state["shard_count"]) == (1, 5, 16)
    assert state["leases"] == []  # no relay ever ran here
    assert state["replicas"] == []
    assert _ids(every) == {o1, o2, o3, r1, r2}
    assert _ids(topic_age) == {r2}  # not r1 (too young), not o1 (orders)
    assert _ids(key_error) == {o1}  # not r1 (too large), not o2 (k-2)
    listed = {r["id"]: r for r in json.loads(every.stdout)}
    assert (listed[o1]["topic"], listed[o1]["key"], listed[o1]["attempts"]) == ("orders", "k-1", 3)
    assert listed[o1]["last_error"] == "KafkaTimeoutError: the broker went away"
    assert listed[o1]["age_s"] > 7000 > listed[o2]["age_s"]
    # The table for people, by id (p1 is pending, not parked).
    assert table.returncode == 0, output(table)
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["id", "topic", "key", "type", "attempts", "age", "last", "error"]
    assert lines[2].split()[:5] == [str(o2), "orders", "k-2", "OrderPlaced", "3"]
    assert lines[3:] == ["1 parked row(s)"]

    # Changes, each to rows of its own, side by side.
    before = rows(backend)
    by_id, by_filter, declined, discarded, unknown, not_parked = await asyncio.gather(
        cli_async("parked", "retry", "--id", str(o2), env=env),
        cli_async("parked", "retry", "--topic", "refunds", "--older-than", "1h", "--json", env=env),
        asyncio.to_thread(
            cli_on_terminal, "parked", "discard", "--key", "k-3", env=env, answer="n\n"
        ),
        cli_async("parked", "discard", "--id", str(r1), "--yes", env=env),
        cli_async("parked", "retry", "--id", "987654", env=env),
        asyncio.to_thread(
            cli_on_terminal,
            "parked",
            "discard",
            "--id",
            str(p1),
            "--id",
            "987655",
            env=env,
            answer="y\n",
        ),
    )
    # Retry by id and by filter: pending again with fresh attempts.
    assert (by_id.returncode, by_id.stdout.strip()) == (0, f"retried 1 row(s): {o2}"), output(by_id)
    assert by_filter.returncode == 0, output(by_filter)
    assert json.loads(by_filter.stdout) == {"ids": [r2], "missing": []}
    # Discard declined at the prompt: exit 4, nothing deleted; confirmed by --yes: deleted.
    assert declined.returncode == 4, output(declined)
    assert "discard these 1 parked row(s)?" in declined.stdout
    assert "nothing changed" in declined.stdout
    assert (discarded.returncode, discarded.stdout.strip()) == (0, f"discarded 1 row(s): {r1}")
    # Unknown or ineligible ids: exit 3 naming them, nothing touched (confirmed or not).
    assert unknown.returncode == 3, output(unknown)
    assert "not found or not parked: 987654" in unknown.stdout, output(unknown)
    assert not_parked.returncode == 3, output(not_parked)
    assert f"not found or not parked: {p1}, 987655" in not_parked.stdout, output(not_parked)

    after = rows(backend)
    assert {i: (r.status, r.attempts) for i, r in after.items()} == {
        o1: ("parked", 3),
        o2: ("pending", 0),
        o3: ("parked", 3),
        r2: ("pending", 0),
        p1: ("pending", 0),
    }
    assert after[o3] == before[o3]
    assert after[p1] == before[p1]


async def test_admin_cli_refuses_bad_arguments_before_touching_the_database() -> None:
    # Nothing listens there: an attempt to connect would exit 1, not 2.
    env = {"OUTBOX_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    cases: dict[tuple[str, ...], str] = {
        ("parked", "list", "--older-than", "5x"): "'5x' is not a duration",
        ("replay", "--since", "2024-01-01T00:00:00"): "has no time zone",
        ("parked", "retry"): "needs --id, a filter, or --all",
        ("parked", "discard", "--yes"): "needs --id, a filter, or --all",
        ("replay",): "replay needs --id, --since or --until",
    }
    results = await asyncio.gather(*(cli_async(*args, env=env) for args in cases))
    for (args, message), done in zip(cases.items(), results, strict=True):
        assert done.returncode == 2, f"{args}: {output(done)}"
        assert message in done.stderr, f"{args}: {output(done)}"


# --------------------------------------------------------------------------- replay


async def test_replay_republishes_retained_events_with_their_event_id(
    backend: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("replay")
    first = emit(backend, *(event(f"k-{i % 4}", topic=topic, payload={"i": i}) for i in range(10)))
    settings = relay_settings(backend, kafka_bootstrap, http_port=0, retention="keep")
    env = _db(backend)
    async with running_relay(settings) as relay:
        await wait_drained(backend)
        await asyncio.sleep(0.05)
        middle = dt.datetime.now(dt.UTC)
        await asyncio.sleep(0.05)
        second = emit(
            backend, *(event(f"k-{i % 4}", topic=topic, payload={"i": i}) for i in range(10, 20))
        )
        await wait_drained(backend)
        assert all(r.published for r in rows(backend).values())  # retained, marked

        status = await cli_async("status", "--json", env=env)
        assert status.returncode == 0, output(status)
        state = json.loads(status.stdout)
        assert state["replicas"] == [settings.leases.replica_id]
        assert {(x["owner"], x["live"]) for x in state["leases"]} == {
            (settings.leases.replica_id, True)
        }
        assert len(state["leases"]) == 16

        # Only what was published since `middle`: the second ten.
        done = await cli_async("replay", "--since", middle.isoformat(), "--json", "--yes", env=env)
        assert done.returncode == 0, output(done)
        assert json.loads(done.stdout) == {"ids": sorted(second), "missing": []}
        await wait_drained(backend)

        unknown = await cli_async(
            "replay", "--id", str(first[0]), "--id", "987654", "--yes", env=env
        )
        assert unknown.returncode == 3, output(unknown)
        assert "not found or not retained: 987654" in unknown.stdout
        await wait_drained(backend)
        # The settle commits before the lane counts its outcome.
        await until(
            lambda: relay.stats.published >= 31, 10, "the last settle counted", blocking=True
        )
        published = relay.stats.published

    event_ids = {r.id: r.event_id for r in rows(backend).values()}
    records = await read_topic(kafka_bootstrap, topic)
    seen = Counter((r.header("event_id") or b"").decode() for r in records)
    # The first ten once, except first[0] (replayed by id), the second ten twice: each copy
    # carries the row's original event_id, so consumers skip what they applied.
    expected = Counter({event_ids[i]: 1 for i in first})
    expected.update(event_ids[i] for i in [*second, *second, first[0]])
    assert seen == expected
    assert published == 31
