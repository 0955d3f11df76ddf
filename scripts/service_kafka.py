"""The Kafka of scripts/services.py: Apache Kafka KAFKA_VERSION (KRaft, one combined node)
assembled from Maven Central with mvn (scripts/kafka/pom.xml) into the cache folder, its
config and storage written and formatted there, started as a detached java process on
127.0.0.1:OUTBOX_KAFKA_PORT, and proven ready by a produce/consume round trip.
KAFKA_BOOTSTRAP_SERVERS, when set, is taken as given and only checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from scripts.service_common import KAFKA_VERSION, ROOT, P, ServiceError, port_open, run, say

KAFKA_PORT = int(os.environ.get("OUTBOX_KAFKA_PORT", "9092"))
KAFKA_CONTROLLER_PORT = KAFKA_PORT + 1
DEFAULT_BOOTSTRAP = f"127.0.0.1:{KAFKA_PORT}"
KAFKA_READY_TIMEOUT_S = 90.0


def kafka_fetch() -> None:
    if P.kafka_libs.is_dir() and any(P.kafka_libs.glob("kafka_2.13-*.jar")):
        return
    if not shutil.which("mvn"):
        raise ServiceError(
            "mvn is not on PATH; it is needed once to fetch Kafka from Maven Central"
        )
    say(
        f"kafka: fetching Apache Kafka {KAFKA_VERSION} and its runtime dependencies from Maven Central (one time)"
    )
    tmp = P.kafka_libs.with_name(f"libs.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    res = run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(ROOT / "scripts" / "kafka" / "pom.xml"),
            f"-Dkafka.version={KAFKA_VERSION}",
            "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ],
        check=False,
    )
    if res.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
        raise ServiceError(f"mvn could not fetch Kafka:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    shutil.rmtree(P.kafka_libs, ignore_errors=True)
    tmp.rename(P.kafka_libs)


def kafka_write_config() -> None:
    P.kafka_home.mkdir(parents=True, exist_ok=True)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{KAFKA_CONTROLLER_PORT}",
        "listeners": f"PLAINTEXT://127.0.0.1:{KAFKA_PORT},CONTROLLER://127.0.0.1:{KAFKA_CONTROLLER_PORT}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{KAFKA_PORT}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(P.kafka_data),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Tests create many short-lived topics; keep the broker's disk use small.
        "log.retention.hours": "24",
        "log.segment.bytes": str(64 * 1024 * 1024),
        # A deleted topic's files go at once, not a minute later: their removal took the
        # broker's CPU in whatever benchmark window it fell (a drain ran at half speed).
        "log.segment.delete.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    P.kafka_props.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    P.kafka_log4j.write_text(
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {P.kafka_log}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "logger.kafka.name = kafka\n"
        "logger.kafka.level = info\n"
        "logger.org.name = org.apache.kafka\n"
        "logger.org.level = warn\n"
    )


def java_cmd(main: str, *args: str) -> list[str]:
    return [
        "java",
        "-Xmx512m",
        "-Xms512m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={P.kafka_log4j}",
        f"-Dkafka.logs.dir={P.kafka_home}",
        "-cp",
        f"{P.kafka_libs}/*",
        main,
        *args,
    ]


def kafka_format() -> None:
    if (P.kafka_data / "meta.properties").exists():
        return
    say(f"kafka: formatting storage in {P.kafka_data}")
    cluster_id = (
        run(java_cmd("kafka.tools.StorageTool", "random-uuid")).stdout.strip().splitlines()[-1]
    )
    res = run(
        java_cmd(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(P.kafka_props),
            "--standalone",
        ),
        check=False,
    )
    if res.returncode != 0:
        raise ServiceError(f"kafka storage format failed:\n{res.stdout}{res.stderr}")


def kafka_pid() -> int | None:
    # After a reboot or a killed session the pid may belong to another process.
    try:
        pid = int(P.kafka_pid.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"kafka.Kafka" in cmdline else None


def kafka_start() -> None:
    if not shutil.which("java"):
        raise ServiceError("java is not on PATH; Kafka needs Java 17")
    P.kafka_log.unlink(missing_ok=True)
    with open(P.kafka_home / "stdout.log", "wb") as out:
        proc = subprocess.Popen(
            java_cmd("kafka.Kafka", str(P.kafka_props)),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    P.kafka_pid.write_text(str(proc.pid))


def kafka_up() -> str:
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        kafka_ready(given, timeout=KAFKA_READY_TIMEOUT_S)
        say(f"kafka: using KAFKA_BOOTSTRAP_SERVERS as given ({given})")
        return given
    if kafka_pid() is None:
        if port_open(KAFKA_PORT):
            raise ServiceError(
                f"port {KAFKA_PORT} is taken by another process; stop it or set KAFKA_BOOTSTRAP_SERVERS"
            )
        kafka_fetch()
        kafka_write_config()
        kafka_format()
        kafka_start()
        say(
            f"kafka: started pid {kafka_pid()} on {DEFAULT_BOOTSTRAP}, waiting for a client round trip"
        )
    try:
        kafka_ready(DEFAULT_BOOTSTRAP, timeout=KAFKA_READY_TIMEOUT_S)
    except ServiceError as exc:
        tail = P.kafka_log.read_text(errors="replace")[-3000:] if P.kafka_log.exists() else ""
        out = P.kafka_home / "stdout.log"
        tail += out.read_text(errors="replace")[-2000:] if out.exists() else ""
        raise ServiceError(f"{exc}\n--- broker log tail ---\n{tail}") from exc
    return DEFAULT_BOOTSTRAP


def kafka_ready(bootstrap: str, *, timeout: float) -> None:
    """Prove the broker works: create a topic, produce a record, consume it back."""
    deadline = time.monotonic() + timeout
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    # Clients log every refused connection; wait quietly for the socket first.
    while not port_open(int(port), host or "127.0.0.1"):
        if time.monotonic() > deadline:
            raise ServiceError(f"kafka at {bootstrap} did not open its port in {timeout:.0f}s")
        time.sleep(0.2)
    asyncio.run(_kafka_round_trip(bootstrap, deadline))


async def _kafka_round_trip(bootstrap: str, deadline: float) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    topic = "__outbox_services_ready"
    token = uuid.uuid4().hex.encode()
    last: BaseException | None = None
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", request_timeout_ms=5000
        )
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        try:
            await admin.start()
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
            await producer.start()
            meta = await producer.send_and_wait(topic, token)
            await consumer.start()
            tp = TopicPartition(topic, meta.partition)
            consumer.assign([tp])
            consumer.seek(tp, meta.offset)
            rec = await asyncio.wait_for(consumer.getone(), timeout=10)
            if rec.value != token:
                raise ServiceError(f"kafka round trip read back {rec.value!r}, expected {token!r}")
            return
        except (KafkaError, OSError, TimeoutError) as exc:
            last = exc
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
            with contextlib.suppress(Exception):
                await producer.stop()
            with contextlib.suppress(Exception):
                await admin.close()
    raise ServiceError(
        f"kafka at {bootstrap} did not complete a produce/consume round trip: {last!r}"
    )


def kafka_down() -> None:
    pid = kafka_pid()
    if pid is None:
        say("kafka: not running")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and kafka_pid() is not None:
        time.sleep(0.2)
    if kafka_pid() is not None:
        os.kill(pid, signal.SIGKILL)
    P.kafka_pid.unlink(missing_ok=True)
    say("kafka: stopped")
