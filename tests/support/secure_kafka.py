"""A second Kafka broker with SSL and SASL_SSL (SCRAM) listeners and ACLs, for the security
tests: one per test session (tests/acceptance/conftest.py), shared by their modules.

The test makes its own CA with openssl, signs the broker's certificate (SAN IP:127.0.0.1
only, so connecting by "localhost" fails hostname verification) and a client
certificate, adds a SCRAM user when formatting the storage, and runs the broker from the
jars scripts/services.py cached. Listeners, all on 127.0.0.1:
  PLAINTEXT (inter-broker and test administration), SSL (client certificate required),
  SASL_SSL (SCRAM-SHA-256), and the controller.
With the authorizer on, the PLAINTEXT principal (ANONYMOUS) and the client certificate's
(CN=client) are super users; the SCRAM user may do only what add_acls grants it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import services
from scripts.ports import reserved_ports

SCRAM_USER = "relay-user"
SCRAM_PASSWORD = "canary-scram-pw-5521"  # a canary: no log or output may ever show it
# The modules that use the session's secure broker: under xdist they share one worker.
SECURE_KAFKA = pytest.mark.xdist_group("secure_kafka")
CLIENT_CERT_PRINCIPAL = "User:CN=client"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> None:
    """ca.pem, broker.pem (key + chain, PKCS#8), client.crt/client.key: all signed by the CA."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=outbox-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=folder,
    )
    for name, san in (("broker", "IP:127.0.0.1"), ("client", "DNS:relay-client")):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=folder,
        )
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
            cwd=folder,
        )
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8", cwd=folder)
    (folder / "broker.pem").write_text(
        (folder / "broker.pk8").read_text() + (folder / "broker.crt").read_text()
    )


@dataclass(frozen=True)
class SecureBroker:
    folder: Path
    plaintext: str  # for test administration only
    ssl: str
    sasl_ssl: str
    scram_user: str
    scram_password: str

    @property
    def ca(self) -> str:
        return str(self.folder / "pki" / "ca.pem")

    @property
    def client_cert(self) -> str:
        return str(self.folder / "pki" / "client.crt")

    @property
    def client_key(self) -> str:
        return str(self.folder / "pki" / "client.key")


@contextlib.contextmanager
def secure_broker(
    folder: Path, scram_password: str, *, authorizer: bool = False
) -> Iterator[SecureBroker]:
    """authorizer: ACLs enforced (StandardAuthorizer); the PLAINTEXT listeners' principal
    (ANONYMOUS: test administration, the controller) and the client certificate's are super
    users, and the SCRAM user may do only what add_acls grants it."""
    libs = services.P.kafka_libs
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"Kafka jars are not cached in {libs}: run scripts/services up first")
    pki = folder / "pki"
    make_pki(pki)
    plain, tls, sasl, controller = reserved_ports(4)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
        "listeners": (
            f"INTERNAL://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl},"
            f"CONTROLLER://127.0.0.1:{controller}"
        ),
        "advertised.listeners": f"INTERNAL://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(folder / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    if authorizer:
        props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        props["super.users"] = f"User:ANONYMOUS;{CLIENT_CERT_PRINCIPAL}"
    config = folder / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log4j = folder / "log4j2.properties"
    log4j.write_text(
        services.P.kafka_log4j.read_text().replace(
            str(services.P.kafka_log), str(folder / "server.log")
        )
    )

    def java(main: str, *args: str) -> list[str]:
        return [
            "java",
            "-Xmx384m",
            "-Xms384m",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={folder}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    cluster = subprocess.run(
        java("kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True, check=True
    )
    subprocess.run(
        java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster.stdout.strip().splitlines()[-1],
            "-c",
            str(config),
            "--standalone",
            "--add-scram",
            f"SCRAM-SHA-256=[name={SCRAM_USER},password={scram_password}]",
        ),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    out = open(folder / "stdout.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(java("kafka.Kafka", str(config)), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not services.port_open(sasl):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the secure broker did not start:\n"
                    + (folder / "stdout.log").read_text()[-3000:]
                )
            time.sleep(0.2)
        yield SecureBroker(
            folder,
            f"127.0.0.1:{plain}",
            f"127.0.0.1:{tls}",
            f"127.0.0.1:{sasl}",
            SCRAM_USER,
            scram_password,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


def add_acls(broker: SecureBroker, *rules: str) -> None:
    """Grant (or deny) the SCRAM user these rules, TYPE:NAME:OPERATION:allow|deny each
    (tests/support/KafkaAcls.java), through the broker's PLAINTEXT listener."""
    program = Path(__file__).with_name("KafkaAcls.java")
    subprocess.run(
        [
            "java",
            "-cp",
            f"{services.P.kafka_libs}/*",
            str(program),
            broker.plaintext,
            f"User:{broker.scram_user}",
            *rules,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
