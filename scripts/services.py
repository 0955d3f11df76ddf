"""Start, stop and inspect the Postgres and Kafka that tests, demos and benchmarks use.

Both servers are real: Debian's postgresql in a cluster this script owns, and Apache Kafka
(KRaft, one combined node) assembled from Maven Central into a cache folder. Everything
binds to 127.0.0.1. When DATABASE_URL or KAFKA_BOOTSTRAP_SERVERS is set, that service is
taken as given and only checked.

Usage: scripts/services up|down|status|env [--only postgres|kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The postgres user must reach the cluster's folder, and root's home is closed to it.
_DEFAULT_CACHE = (
    Path("/var/cache/outbox-relay")
    if os.geteuid() == 0
    else Path.home() / ".cache" / "outbox-relay"
)
CACHE = Path(os.environ.get("OUTBOX_CACHE_DIR", _DEFAULT_CACHE))
RUN = CACHE / "run"

PG_PORT = int(os.environ.get("OUTBOX_PG_PORT", "55432"))
# Extra server options appended to the defaults, e.g. "-c wal_level=logical" (the relay
# benchmark runs its own cluster with it for Debezium). They apply when the script starts
# the server; a running server keeps the options it was started with.
PG_EXTRA_OPTIONS = os.environ.get("OUTBOX_PG_OPTIONS", "").strip()
PG_USER = "outbox"
PG_PASSWORD = (
    "outbox-local-dev"  # trust auth locally; distinct so log redaction does not mask "outbox"
)
PG_DB = "outbox"
DEFAULT_DATABASE_URL = f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{PG_PORT}/{PG_DB}"

KAFKA_VERSION = "4.1.1"
KAFKA_PORT = int(os.environ.get("OUTBOX_KAFKA_PORT", "9092"))
KAFKA_CONTROLLER_PORT = KAFKA_PORT + 1
DEFAULT_BOOTSTRAP = f"127.0.0.1:{KAFKA_PORT}"
KAFKA_READY_TIMEOUT_S = 90.0


class ServiceError(Exception):
    """A service could not be started or reached; the message says what to do."""


@dataclass(frozen=True)
class Paths:
    pg_data: Path = RUN / "postgres"
    pg_log: Path = RUN / "postgres.log"
    kafka_libs: Path = CACHE / f"kafka-{KAFKA_VERSION}" / "libs"
    kafka_home: Path = RUN / "kafka"

    @property
    def kafka_data(self) -> Path:
        return self.kafka_home / "data"

    @property
    def kafka_props(self) -> Path:
        return self.kafka_home / "server.properties"

    @property
    def kafka_log4j(self) -> Path:
        return self.kafka_home / "log4j2.properties"

    @property
    def kafka_pid(self) -> Path:
        return self.kafka_home / "kafka.pid"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_home / "server.log"


P = Paths()


def say(msg: str) -> None:
    print(f"[services] {msg}", flush=True)


def run(
    cmd: Sequence[str], *, check: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=check, text=True, capture_output=True, **kw)  # type: ignore[call-overload, no-any-return]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# --------------------------------------------------------------------------- Postgres


def pg_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parent)
    return candidates[-1].parent if candidates else None


def as_postgres(cmd: Sequence[str]) -> list[str]:
    # initdb refuses to run as root, so the cluster belongs to the postgres user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


def pg_install() -> Path:
    found = pg_bin()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(
            "Postgres is not installed and this user cannot apt-get install it; "
            "install Debian's postgresql package or set DATABASE_URL."
        )
    say("installing Debian's postgresql package (one time)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", "postgresql"], env=env)
    found = pg_bin()
    if not found:
        raise ServiceError("apt-get installed postgresql but no pg_ctl was found")
    return found


def pg_running(bindir: Path) -> bool:
    if not (P.pg_data / "PG_VERSION").exists():
        return False
    return (
        run(
            as_postgres([str(bindir / "pg_ctl"), "-D", str(P.pg_data), "status"]), check=False
        ).returncode
        == 0
    )


def pg_up() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        pg_check(url)
        say(f"postgres: using DATABASE_URL as given ({redact(url)})")
        return url
    bindir = pg_install()
    if not (P.pg_data / "PG_VERSION").exists():
        say(f"postgres: creating a cluster in {P.pg_data}")
        shutil.rmtree(P.pg_data, ignore_errors=True)
        P.pg_data.mkdir(parents=True, mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(P.pg_data, "postgres", "postgres")
        res = run(
            as_postgres(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(P.pg_data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                ]
            ),
            check=False,
        )
        if res.returncode != 0:
            raise ServiceError(f"initdb failed:\n{res.stderr}")
    if not pg_running(bindir):
        if port_open(PG_PORT):
            raise ServiceError(
                f"port {PG_PORT} is taken by another process; set OUTBOX_PG_PORT or DATABASE_URL"
            )
        if os.geteuid() == 0:
            P.pg_log.touch()
            shutil.chown(P.pg_log, "postgres", "postgres")
        # track_commit_timestamp lets tests compare id order with real commit order.
        opts = (
            f"-p {PG_PORT} -k {P.pg_data} -c listen_addresses=127.0.0.1"
            " -c max_connections=300 -c track_commit_timestamp=on"
        )
        if PG_EXTRA_OPTIONS:
            opts += f" {PG_EXTRA_OPTIONS}"
        res = run(
            as_postgres(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(P.pg_data),
                    "-l",
                    str(P.pg_log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=False,
        )
        if res.returncode != 0:
            tail = P.pg_log.read_text(errors="replace")[-2000:] if P.pg_log.exists() else ""
            raise ServiceError(f"postgres did not start:\n{res.stdout}{res.stderr}\n{tail}")
    psql = [
        str(bindir / "psql"),
        "-h",
        str(P.pg_data),
        "-p",
        str(PG_PORT),
        "-U",
        "postgres",
        "-v",
        "ON_ERROR_STOP=1",
        "-qAt",
    ]
    exists = run(
        as_postgres([*psql, "-c", f"SELECT 1 FROM pg_roles WHERE rolname = '{PG_USER}'"])
    ).stdout.strip()
    if not exists:
        run(
            as_postgres(
                [*psql, "-c", f"CREATE ROLE {PG_USER} LOGIN SUPERUSER PASSWORD '{PG_PASSWORD}'"]
            )
        )
    exists = run(
        as_postgres([*psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DB}'"])
    ).stdout.strip()
    if not exists:
        run(as_postgres([*psql, "-c", f"CREATE DATABASE {PG_DB} OWNER {PG_USER}"]))
    pg_check(DEFAULT_DATABASE_URL)
    return DEFAULT_DATABASE_URL


def pg_check(url: str) -> None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise ServiceError(f"cannot connect to Postgres at {redact(url)}: {exc}") from exc


def pg_down() -> None:
    bindir = pg_bin()
    if bindir and pg_running(bindir):
        run(as_postgres([str(bindir / "pg_ctl"), "-D", str(P.pg_data), "-m", "fast", "-w", "stop"]))
        say("postgres: stopped")
    else:
        say("postgres: not running")


def redact(url: str) -> str:
    # Never print a password, even the test one: the same code prints user DSNs.
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


# --------------------------------------------------------------------------- Kafka


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


# --------------------------------------------------------------------------- CLI


def status() -> int:
    bindir = pg_bin()
    pg = "running" if bindir and pg_running(bindir) else "stopped"
    say(
        f"postgres: {pg} ({redact(os.environ.get('DATABASE_URL', DEFAULT_DATABASE_URL))}), data {P.pg_data}"
    )
    pid = kafka_pid()
    kafka = f"running pid {pid}" if pid else "stopped"
    say(
        f"kafka: {kafka} ({os.environ.get('KAFKA_BOOTSTRAP_SERVERS', DEFAULT_BOOTSTRAP)}), logs {P.kafka_log}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/services",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["up", "down", "status", "env"])
    parser.add_argument("--only", choices=["postgres", "kafka"], help="act on one service only")
    args = parser.parse_args(argv)
    want = {args.only} if args.only else {"postgres", "kafka"}
    try:
        RUN.mkdir(parents=True, exist_ok=True)
        RUN.chmod(0o755)
        if args.action == "up":
            t0 = time.monotonic()
            if "postgres" in want:
                url = pg_up()
                say(f"postgres: ready at {redact(url)} in {time.monotonic() - t0:.1f}s")
            t1 = time.monotonic()
            if "kafka" in want:
                boot = kafka_up()
                say(f"kafka: ready at {boot} in {time.monotonic() - t1:.1f}s")
            say(f"all up in {time.monotonic() - t0:.1f}s; stop with: scripts/services down")
        elif args.action == "down":
            if "kafka" in want:
                kafka_down()
            if "postgres" in want:
                pg_down()
        elif args.action == "status":
            return status()
        else:
            print(f"export DATABASE_URL={os.environ.get('DATABASE_URL', DEFAULT_DATABASE_URL)}")
            print(
                f"export KAFKA_BOOTSTRAP_SERVERS={os.environ.get('KAFKA_BOOTSTRAP_SERVERS', DEFAULT_BOOTSTRAP)}"
            )
    except ServiceError as exc:
        print(f"[services] ERROR: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(
            f"[services] ERROR: {' '.join(exc.cmd)} failed ({exc.returncode}):\n{exc.stdout}{exc.stderr}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
