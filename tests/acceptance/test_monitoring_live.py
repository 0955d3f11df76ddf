"""The shipped alert rules and dashboard against the real thing (real Postgres and Kafka):

- every metric a rule or a dashboard panel names is one a running relay or consumer
  exports, read from their live /metrics (a metric renamed in the code fails here);
- a real Prometheus (Debian's package, loopback only, its own config and data folder)
  scrapes a relay that cannot reach its broker while rows are pending, with the shipped
  rule file: the publishing-stalled and not-ready alerts go pending for that relay and for
  no healthy one, and every dashboard query is one Prometheus accepts.

Prometheus is installed by scripts/service_prometheus.py when missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings, PsycopgAsync
from outbox_core.kafka_security import KafkaSecurity
from scripts import service_prometheus
from scripts.ports import refusing_address, reserved_port
from scripts.service_common import ServiceError
from tests.conftest import TopicFactory
from tests.support.consumers import running_consumer
from tests.support.db import Backend, postgres_backend
from tests.support.monitoring import (
    RULES,
    dashboard_exprs,
    exported_series,
    missing,
    rule_exprs,
    substitute_dashboard_vars,
)
from tests.support.ops import Metrics, ops_port, scrape
from tests.support.postgres import Databases
from tests.support.relay import RelayProcess, relay_env, relay_settings, running_relay, wait_drained
from tests.support.stores import emit, event
from tests.support.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def prometheus_binary() -> Path:
    try:
        return service_prometheus.prometheus()
    except (ServiceError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"prometheus could not be installed: {exc}")


@pytest.fixture
def second_pg(databases: Databases) -> Backend:
    return postgres_backend(databases.migrated())


# --------------------------------------------------------------------------- metric names


async def test_every_metric_the_rules_and_dashboard_name_is_exported(
    pg: Backend, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic("mon")
    emit(pg, *(event(f"k-{i % 3}", topic=topic, payload={"i": i}) for i in range(6)))
    settings = relay_settings(pg, kafka_bootstrap, http_port=0, gauges_interval_s=0.1)
    async with running_relay(settings) as relay:
        port = await ops_port(relay)
        await wait_drained(pg)

        async def counted() -> Metrics | None:
            # The settle commits before the cycle's outcome reaches the metrics.
            m = await scrape(port)
            return m if m.value("outbox_relay_events_published_total", topic=topic) else None

        relay_scrape: Metrics = await until(counted, 30, "the published events counted")
    assert relay_scrape.value("outbox_relay_events_published_total", topic=topic) == 6

    applied: list[str] = []

    async def handler(event: ConsumedEvent, conn: Any) -> None:
        applied.append(str(event.event_id))

    consumer_settings = ConsumerSettings(
        security=KafkaSecurity.plaintext(),
        bootstrap_servers=kafka_bootstrap,
        group_id=f"g-{topic}",
        http_port=0,
        lag_interval_s=0.1,
    )
    app = ConsumerApp(consumer_settings, PsycopgAsync(pg.target))
    app.handler(topic)(handler)
    async with running_consumer(app) as running:
        consumer_port = await ops_port(running.consumer)

        async def caught_up() -> Metrics | None:
            m = await scrape(consumer_port)
            done = m.value("outbox_consumer_events_processed_total", topic=topic) == 6
            return (
                m
                if done and m.value("outbox_consumer_lag", topic=topic, partition="0") == 0
                else None
            )

        consumer_scrape: Metrics = await until(caught_up, 60, "the consumer to apply the events")

    exported = exported_series(relay_scrape.text) | exported_series(consumer_scrape.text)
    used = {**rule_exprs(), **dashboard_exprs()}
    assert not missing(used, exported), missing(used, exported)
    # The check itself: a name the code does not export (a rename, a dropped suffix) is named.
    renamed = {"a renamed metric": "rate(outbox_relay_events_publish_total[5m])"}
    assert missing(renamed, exported) == {"a renamed metric": {"outbox_relay_events_publish_total"}}
    no_suffix = {"a counter without _total": "rate(outbox_consumer_dead_lettered[5m])"}
    assert missing(no_suffix, exported)


# --------------------------------------------------------------------------- Prometheus


class Prometheus:
    """The HTTP API of a Prometheus on loopback (blocking calls: run them in a thread)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.load(resp)
        assert doc["status"] == "success", doc
        return doc["data"]

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["alerts"]
        return found

    def query(self, expr: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/query", query=expr)["result"]
        return found


@contextlib.asynccontextmanager
async def prometheus_scraping(tmp_path: Path, targets: dict[str, int]) -> AsyncIterator[Prometheus]:
    """A Prometheus with the shipped rule file, scraping job -> 127.0.0.1:port every second
    and evaluating the rules every second."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in targets.items()
        ],
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = reserved_port()
    proc = await asyncio.to_thread(
        service_prometheus.prometheus_start, path, tmp_path / "prometheus", port
    )
    try:
        yield Prometheus(port)
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stop(relay: RelayProcess) -> None:
    if relay.running:
        relay.terminate(30)


async def test_a_stalled_relay_raises_the_stalled_alert_on_a_real_prometheus(
    pg: Backend,
    second_pg: Backend,
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    prometheus_binary: Path,
    tmp_path: Path,
) -> None:
    topic = await new_topic("stall")
    emit(pg, *(event(f"k-{i % 4}", topic=topic, payload={"i": i}) for i in range(20)))
    emit(second_pg, *(event(f"h-{i % 4}", topic=topic, payload={"i": i}) for i in range(20)))
    ports = {"outbox-relay-stalled": reserved_port(), "outbox-relay-healthy": reserved_port()}
    started = time.monotonic()
    with refusing_address() as nowhere:
        # Rows pending, the relay up and scraped, its broker refusing every connection.
        stalled = RelayProcess(
            relay_env(pg, nowhere, http_port=ports["outbox-relay-stalled"], gauges_interval_s=0.2),
            tmp_path / "stalled.log",
            "stalled",
        )
        healthy = RelayProcess(
            relay_env(
                second_pg,
                kafka_bootstrap,
                http_port=ports["outbox-relay-healthy"],
                gauges_interval_s=0.2,
            ),
            tmp_path / "healthy.log",
            "healthy",
        )
        try:
            async with prometheus_scraping(tmp_path, ports) as prom:

                def alive() -> None:
                    for relay in (stalled, healthy):
                        assert relay.running, relay.log()

                async def pending() -> list[dict[str, Any]] | None:
                    alerts = await asyncio.to_thread(prom.alerts)
                    # The stalled relay's only: until the healthy one's first publish, its
                    # rows are pending with no published series, which the stall rule also
                    # matches (the rule's `for` is not outlasted here, so it stays pending).
                    mine = [
                        a
                        for a in alerts
                        if a["labels"]["alertname"]
                        in ("OutboxRelayPublishingStalled", "OutboxRelayNotReady")
                        and a["labels"].get("job") == "outbox-relay-stalled"
                        and a["state"] == "pending"
                    ]
                    return mine if len(mine) == 2 else None

                found: list[dict[str, Any]] = await until(
                    pending,
                    90,
                    "the stalled relay's alerts to go pending",
                    interval=0.5,
                    alive=alive,
                )
                await wait_drained(second_pg)  # the healthy relay published its rows

                async def healthy_published() -> list[dict[str, Any]] | None:
                    result = await asyncio.to_thread(
                        prom.query,
                        'sum(outbox_relay_events_published_total{job="outbox-relay-healthy"}) >= 20'
                        ' and on() max(outbox_relay_pending_rows{job="outbox-relay-healthy"}) == 0'
                        # two samples since it published: what rate() in the panels needs
                        " and on() min(count_over_time(outbox_relay_events_published_total"
                        '{job="outbox-relay-healthy"}[1m])) >= 2',
                    )
                    return result or None

                await until(healthy_published, 60, "Prometheus to see the healthy relay drain")
                alerts = await asyncio.to_thread(prom.alerts)
                results = {
                    where: await asyncio.to_thread(
                        prom.get, "/api/v1/query", query=substitute_dashboard_vars(expr)
                    )
                    for where, expr in dashboard_exprs().items()
                    if not where.startswith("variable")
                }
        finally:
            for relay in (stalled, healthy):
                await asyncio.to_thread(_stop, relay)
    elapsed = time.monotonic() - started

    by_name = {a["labels"]["alertname"]: a for a in found}
    stall = by_name["OutboxRelayPublishingStalled"]
    assert stall["labels"]["job"] == "outbox-relay-stalled"
    assert stall["labels"]["severity"] == "critical"
    assert float(stall["value"]) == 20  # the pending rows
    assert by_name["OutboxRelayNotReady"]["labels"]["job"] == "outbox-relay-stalled"
    # No alert names the healthy relay once it has published.
    assert not [a for a in alerts if a["labels"].get("job") == "outbox-relay-healthy"], alerts
    # Every dashboard panel's query is valid PromQL for Prometheus, and the relay panels
    # that have something to show with these two relays show it.
    assert all(r["resultType"] in ("vector", "scalar", "matrix") for r in results.values())
    for panel in ("Published events/s", "Backlog", "Oldest pending event", "Ready replicas",
                  "Shards held", "Lease changes", "Rows per batch"):  # fmt: skip
        shown = [w for w, r in results.items() if w.startswith(f"panel {panel!r}") and r["result"]]
        assert shown, (panel, {w: r for w, r in results.items() if panel in w})
    print(f"relays started to alerts checked: {elapsed:.1f}s")
