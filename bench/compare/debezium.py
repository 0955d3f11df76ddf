"""Contender "debezium": Kafka Connect standalone with Debezium's Postgres connector (pgoutput)
and its outbox EventRouter, from Maven Central (bench/connect/pom.xml). It reads the backlog
from the WAL: the connector creates its slot, is stopped, the backlog is loaded, the
connector is started again. Also its offered-load latency."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from bench.compare.backlog import load_backlog
from bench.compare.common import DEBEZIUM_VERSION, KAFKA_VERSION, ROOT, Q, say
from bench.compare.context import Context
from bench.compare.drain import Drain, drain_processes
from bench.compare.latency import LatencyPoint, offered_loads, warm_rows
from bench.shared.processes import Proc, launch
from scripts.ports import reserved_port


def connect_libs(cache: Path) -> Path:
    """Kafka Connect and Debezium jars from Maven Central, fetched once into the cache."""
    libs = cache / f"connect-{KAFKA_VERSION}-debezium-{DEBEZIUM_VERSION}" / "libs"
    if libs.is_dir() and any(libs.glob("debezium-connector-postgres-*.jar")):
        return libs
    if not shutil.which("mvn"):
        raise RuntimeError("mvn is not on PATH: it fetches Kafka Connect and Debezium once")
    say(
        f"debezium: fetching Kafka Connect {KAFKA_VERSION} and Debezium {DEBEZIUM_VERSION} (one time)"
    )
    tmp = libs.with_name(f"libs.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    res = subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(ROOT / "bench" / "connect" / "pom.xml"),
            f"-Dkafka.version={KAFKA_VERSION}",
            f"-Ddebezium.version={DEBEZIUM_VERSION}",
            "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ],
        text=True,
        capture_output=True,
        timeout=900,
    )
    if res.returncode != 0 or not any(tmp.glob("debezium-connector-postgres-*.jar")):
        raise RuntimeError(
            f"mvn could not fetch Debezium:\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    libs.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(libs)
    return libs


@dataclass
class Debezium:
    """Kafka Connect standalone with one Debezium Postgres connector and the EventRouter."""

    libs: Path
    workdir: Path
    bootstrap: str
    url: str  # the contender's database
    topic_prefix: str
    slot: str
    options: dict[str, str] = field(default_factory=dict)  # connector overrides

    def write_config(self) -> tuple[Path, Path, Path]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        parts = conninfo_to_dict(self.url)
        worker = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "offset.storage.file.filename": str(self.workdir / "connect.offsets"),
            "offset.flush.interval.ms": "10000",
            "listeners": f"http://127.0.0.1:{reserved_port()}",
            "plugin.discovery": "only_scan",
        }
        connector = {
            "name": "outbox-debezium",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": str(parts.get("host", "127.0.0.1")),
            "database.port": str(parts.get("port", "5432")),
            "database.user": str(parts.get("user", "")),
            "database.password": str(parts.get("password", "")),
            "database.dbname": str(parts.get("dbname", "")),
            "topic.prefix": "bench",
            "plugin.name": "pgoutput",
            "slot.name": self.slot,
            "publication.name": self.slot,
            "publication.autocreate.mode": "filtered",
            "table.include.list": "public.outbox_events",
            "snapshot.mode": "no_data",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "event_id",
            "transforms.outbox.table.field.event.key": "key",
            "transforms.outbox.table.field.event.payload": "payload",
            "transforms.outbox.route.by.field": "topic",
            "transforms.outbox.route.topic.replacement": self.topic_prefix + "${routedByValue}",
            "transforms.outbox.table.fields.additional.placement": "event_type:header:event_type",
            **self.options,
        }
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(
            "status = warn\n"
            "appender.console.type = Console\n"
            "appender.console.name = console\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = info\n"
            "rootLogger.appenderRef.console.ref = console\n"
            "logger.reflections.name = org.reflections\n"
            "logger.reflections.level = error\n"
        )
        paths = (self.workdir / "worker.properties", self.workdir / "connector.properties", log4j)
        for path, props in zip(paths[:2], (worker, connector), strict=True):
            path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return paths

    def start(self, logdir: Path, name: str) -> Proc:
        worker, connector, log4j = self.write_config()
        cmd = [
            "java",
            "-Xms256m",
            "-Xmx2g",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.libs}/*",
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(worker),
            str(connector),
        ]
        return launch(name, cmd, dict(os.environ), logdir)

    def wait_streaming(self, proc: Proc, timeout: float = 120.0) -> None:
        """Until the connector's replication slot exists and is in use."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"Kafka Connect exited:\n{proc.tail()}")
            with psycopg.connect(self.url, autocommit=True) as conn:
                row = conn.execute(Q["slot_state"], {"slot": self.slot}).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"Debezium's slot {self.slot} was not active in {timeout:.0f}s:\n{proc.tail()}"
        )

    def drop_slot(self) -> None:
        deadline = time.monotonic() + 30
        with psycopg.connect(self.url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(Q["slot_state"], {"slot": self.slot}).fetchone()
                if row is None:
                    break
                if not row[0]:
                    conn.execute(Q["slot_drop"], {"slot": self.slot})
                    continue
                time.sleep(0.2)
            conn.execute(
                sql.SQL(Q["publication_drop"]).format(publication=sql.Identifier(self.slot))
            )


async def drain_debezium(ctx: Context, libs: Path, round_no: int) -> Drain:
    url, prefix, topic = await ctx.fresh("debezium", f"_r{round_no}")
    slot = f"bench_{ctx.run_id}_r{round_no}"
    dbz = Debezium(
        libs, ctx.logdir / f"connect-r{round_no}", ctx.services.bootstrap, url, prefix, slot
    )
    try:
        # 1. The connector creates its slot and publication, then stops: the WAL from
        # here on is kept for it.
        proc = dbz.start(ctx.logdir, f"debezium-r{round_no}-setup")
        try:
            dbz.wait_streaming(proc)
        finally:
            proc.stop()
        # 2. The backlog is written while it is down, 3. it drains the backlog.
        load_s = load_backlog(url, ctx.backlog.events)
        result = await drain_processes(
            ctx,
            "debezium",
            url,
            topic,
            load_s,
            lambda: [dbz.start(ctx.logdir, f"debezium-r{round_no}")],
            None,
            check_outbox=False,
        )
        result.note = "Kafka Connect JVM (-Xmx2g); start-up includes the JVM and the worker"
    finally:
        dbz.drop_slot()
    ctx.done_with(url)
    return result


async def latency_debezium(ctx: Context, libs: Path) -> list[LatencyPoint]:
    url, prefix, topic = await ctx.fresh("debezium", "_latency")
    slot = f"bench_{ctx.run_id}_latency"
    dbz = Debezium(libs, ctx.logdir / "connect-latency", ctx.services.bootstrap, url, prefix, slot)
    proc = dbz.start(ctx.logdir, "debezium-latency")
    try:
        dbz.wait_streaming(proc)
        load_backlog(url, warm_rows(ctx))  # streamed as warm-up, as ours drains it
        return await offered_loads("debezium", url, topic, ctx, proc)
    finally:
        proc.stop()
        dbz.drop_slot()
        ctx.done_with(url)
