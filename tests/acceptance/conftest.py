"""The acceptance tests' shared secure broker: TLS, SASL/SCRAM and ACLs on one JVM for the
whole session. Its modules carry xdist_group("secure_kafka"), so under xdist they run on
one worker and the broker starts once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.secure_kafka import SCRAM_PASSWORD, SecureBroker, add_acls, secure_broker


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """The SCRAM user may describe and write every topic and write idempotently, and has
    no DescribeConfigs anywhere; a test denies more itself."""
    folder = tmp_path_factory.mktemp("secure-kafka")
    with secure_broker(folder, SCRAM_PASSWORD, authorizer=True) as running:
        add_acls(
            running,
            "TOPIC:*:DESCRIBE:allow",
            "TOPIC:*:WRITE:allow",
            "CLUSTER:kafka-cluster:IDEMPOTENT_WRITE:allow",
        )
        yield running
