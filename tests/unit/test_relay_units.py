"""The relay's pure parts: shard split, settings validation, backoff, error classification."""

from __future__ import annotations

import asyncio
import itertools
import random
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from aiokafka import errors as kafka_errors

from relay.config import RelaySettings, load_settings, unknown_env_names
from relay.control.leases import active_set, fair_share
from relay.errors import RelayConfigError
from relay.ops.observer import MAX_TOPIC_LABELS, RelayObserver
from relay.pipeline.step import BatchOutcome, BatchSettings, _bytes_full, _failure, backoff_s
from relay.service import RelayService
from relay.store import ClaimedRow
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.kafka import RECORD_OVERHEAD, KafkaPublisher, _Acks, _batch_bytes, classify
from relay.transport.memory import MemoryPublisher
from relay.transport.protocol import ACKED, HELD
from relay.transport.records import OutgoingRecord

CANARY = "canary-pw-7f3a91"
GOOD: dict[str, Any] = {
    "database_url": f"postgresql://relay:{CANARY}@db.internal:5432/outbox",
    "kafka_bootstrap_servers": "127.0.0.1:9092",
    "kafka_security_protocol": "PLAINTEXT",
}

# ---------------------------------------------------------------------------- fair_share


@pytest.mark.parametrize("members", [1, 2, 3, 5, 7, 16, 20])
@pytest.mark.parametrize("shard_count", [1, 7, 16, 100])
def test_fair_share_assigns_every_shard_once_and_evenly(members: int, shard_count: int) -> None:
    live = [f"relay-{i}-{random.Random(i).random():.6f}" for i in range(members)]
    shares = {me: fair_share(me, live, shard_count) for me in live}
    assigned = [s for share in shares.values() for s in share]
    assert sorted(assigned) == list(range(shard_count))  # each exactly once
    sizes = [len(share) for share in shares.values()]
    assert max(sizes) - min(sizes) <= 1


def test_fair_share_is_deterministic_whatever_the_order_of_the_membership() -> None:
    live = ["relay-c", "relay-a", "relay-b"]
    expected = {me: fair_share(me, live, 16) for me in live}
    for order in itertools.permutations(live):
        for me in live:
            assert fair_share(me, [*order, order[0]], 16) == expected[me]  # duplicates too
    assert expected["relay-a"] == {0, 3, 6, 9, 12, 15}


def test_fair_share_counts_me_even_before_my_heartbeat_is_visible() -> None:
    assert fair_share("relay-new", ["relay-a"], 4) | fair_share("relay-a", ["relay-new"], 4) == {
        0,
        1,
        2,
        3,
    }
    assert fair_share("relay-new", [], 4) == {0, 1, 2, 3}


# ---------------------------------------------------------------------------- active_set


def test_active_set_keeps_the_replicas_that_hold_leases_when_one_joins() -> None:
    # "relay-a" joins a fleet whose one active replica is "relay-z": nothing moves.
    roster = [("relay-a", False), ("relay-m", False), ("relay-z", True)]
    for me in ("relay-a", "relay-m", "relay-z"):
        assert active_set(me, roster, me == "relay-z", 1) == ["relay-z"]
    assert active_set("relay-a", roster, False, 2) == ["relay-a", "relay-z"]


def test_active_set_picks_by_name_when_nobody_holds_and_all_when_unlimited() -> None:
    roster = [("relay-b", False), ("relay-c", False)]
    assert active_set("relay-c", roster, False, 1) == ["relay-b"]
    assert active_set("relay-a", roster, False, 1) == ["relay-a"]  # me, before my heartbeat shows
    assert active_set("relay-c", roster, False, 0) == ["relay-b", "relay-c"]
    assert active_set("relay-c", roster, False, 5) == ["relay-b", "relay-c"]


def test_active_set_trims_a_transient_surplus_of_holders_the_same_way_everywhere() -> None:
    # Two replicas both hold leases for a moment (a takeover in progress), one may stay.
    roster = [("relay-b", True), ("relay-c", True), ("relay-d", False)]
    assert {tuple(active_set(me, roster, me != "relay-d", 1)) for me, _ in roster} == {("relay-b",)}


# ---------------------------------------------------------------------------- settings


def test_good_settings_load() -> None:
    settings = load_settings(**GOOD)
    assert settings.kafka.acks == "all"
    assert settings.kafka.enable_idempotence is True
    assert settings.database.url.dialect == "postgres"


@pytest.mark.parametrize("scheme", ["mysql", "mariadb", "mysql+pymysql"])
def test_a_mariadb_url_loads(scheme: str) -> None:
    settings = load_settings(**{**GOOD, "database_url": f"{scheme}://relay:pw@db:3306/outbox"})
    assert settings.database.url.dialect == "mariadb"


def test_a_transaction_pooler_is_refused_on_mariadb() -> None:
    with pytest.raises(RelayConfigError, match="database_pooler applies to Postgres only"):
        load_settings(
            **{**GOOD, "database_url": "mysql://relay:pw@db/outbox"},
            database_pooler="transaction",
        )


@pytest.mark.parametrize(
    ("override", "env"),
    [
        ({"kafka_acks": "1"}, "OUTBOX_KAFKA_ACKS"),
        ({"kafka_acks": "0"}, "OUTBOX_KAFKA_ACKS"),
        ({"kafka_enable_idempotence": False}, "OUTBOX_KAFKA_ENABLE_IDEMPOTENCE"),
        ({"kafka_bootstrap_servers": "kafka.internal"}, "OUTBOX_KAFKA_BOOTSTRAP_SERVERS"),
        ({"kafka_bootstrap_servers": "kafka:99999"}, "OUTBOX_KAFKA_BOOTSTRAP_SERVERS"),
        ({"kafka_bootstrap_servers": " , "}, "OUTBOX_KAFKA_BOOTSTRAP_SERVERS"),
        ({"database_url": f"mysql://relay:{CANARY}@db:port/outbox"}, "OUTBOX_DATABASE_URL"),
        ({"database_url": f"mysql://relay:{CANARY}@db/outbox?ssl=x"}, "OUTBOX_DATABASE_URL"),
        ({"database_url": f"mysql://relay:{CANARY}@db/out;box"}, "OUTBOX_DATABASE_URL"),
        ({"database_url": f"postgresql:/relay:{CANARY}@db/outbox"}, "OUTBOX_DATABASE_URL"),
        ({"database_url": f"relay:{CANARY}@db/outbox"}, "OUTBOX_DATABASE_URL"),
        ({"heartbeat_interval_s": 6.0, "lease_ttl_s": 10.0}, "OUTBOX_HEARTBEAT_INTERVAL_S"),
        # A row would wait forever (inf), or for no time the database can store (nan).
        ({"backoff_max_s": float("inf")}, "OUTBOX_BACKOFF_MAX_S"),
        ({"backoff_base_s": float("inf")}, "OUTBOX_BACKOFF_BASE_S"),
        ({"backoff_base_s": float("nan")}, "OUTBOX_BACKOFF_BASE_S"),
        ({"backoff_max_s": 0.0}, "OUTBOX_BACKOFF_MAX_S"),
    ],
)
def test_bad_settings_name_the_variable_and_never_the_password(
    override: dict[str, Any], env: str
) -> None:
    with pytest.raises(RelayConfigError) as info:
        load_settings(**{**GOOD, **override})
    text = str(info.value)
    assert env in text
    assert CANARY not in text
    assert CANARY not in "".join(traceback.format_exception(info.value))
    assert not info.value.retriable


def test_bad_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", GOOD["database_url"])
    monkeypatch.setenv("OUTBOX_KAFKA_BOOTSTRAP_SERVERS", GOOD["kafka_bootstrap_servers"])
    monkeypatch.setenv("OUTBOX_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    assert load_settings().kafka.acks == "all"
    monkeypatch.setenv("OUTBOX_KAFKA_ACKS", "1")
    with pytest.raises(RelayConfigError, match="OUTBOX_KAFKA_ACKS") as info:
        load_settings()
    assert CANARY not in str(info.value)


def test_kafka_topic_applies_the_map_then_the_prefix() -> None:
    settings = load_settings(**GOOD, topic_prefix="prod.", topic_map={"orders": "sales.orders"})
    assert settings.topics.kafka_topic("orders") == "prod.sales.orders"
    assert settings.topics.kafka_topic("payments") == "prod.payments"


# ---------------------------------------------------------------------------- backoff


def _settings(**over: Any) -> RelaySettings:
    return load_settings(**GOOD, **over)


# Known answers for base 0.5 s and cap 300 s: the ceiling after n failures (the wait is
# drawn from its upper half).
BACKOFF_CEILINGS = {
    0: 0.5,
    1: 1.0,
    2: 2.0,
    3: 4.0,
    4: 8.0,
    5: 16.0,
    6: 32.0,
    7: 64.0,
    8: 128.0,
    9: 256.0,
    10: 300.0,
    11: 300.0,
    39: 300.0,
}


@pytest.mark.parametrize(("attempts", "ceiling"), sorted(BACKOFF_CEILINGS.items()))
def test_backoff_doubles_with_jitter_and_stays_under_the_cap(attempts: int, ceiling: float) -> None:
    settings = _settings(backoff_base_s=0.5, backoff_max_s=300.0)
    samples = [backoff_s(attempts, settings.batch) for _ in range(200)]
    assert all(ceiling / 2 <= s <= ceiling for s in samples), (attempts, min(samples), max(samples))
    assert max(samples) - min(samples) > 0  # jittered, not a fixed value
    # Drawn across the whole upper half, not pinned near one end of it.
    assert min(samples) < ceiling * 0.6
    assert max(samples) > ceiling * 0.9


@pytest.mark.parametrize("attempts", [1023, 1024, 5000, 10**9])
def test_backoff_of_a_row_failing_for_very_long_is_the_cap(attempts: int) -> None:
    settings = _settings(backoff_base_s=0.5, backoff_max_s=300.0, max_attempts=10**10)
    assert 150.0 <= backoff_s(attempts, settings.batch) <= 300.0


# ---------------------------------------------------------------------------- classify


def test_classify_kafka_timeout_is_retriable() -> None:
    failed = classify(kafka_errors.KafkaTimeoutError())
    assert (failed.retriable, failed.fatal) == (True, False)
    assert failed.reason is FailureReason.TIMEOUT
    assert "KafkaTimeoutError" in str(failed)


def test_classify_message_too_large_is_not_retriable() -> None:
    failed = classify(kafka_errors.MessageSizeTooLargeError())
    assert (failed.retriable, failed.fatal) == (False, False)
    assert failed.reason is FailureReason.TOO_LARGE
    assert "MessageSizeTooLargeError" in str(failed)


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.ProducerClosed(),
        kafka_errors.ProducerFenced(),
        kafka_errors.OutOfOrderSequenceNumber(),
    ],
)
def test_classify_a_broken_producer_is_fatal(error: Exception) -> None:
    failed = classify(error)
    assert failed.fatal
    assert failed.retriable  # the rows are not at fault: a new producer may send them


def test_classify_other_errors() -> None:
    assert classify(kafka_errors.KafkaConnectionError()).retriable
    assert classify(kafka_errors.NotLeaderForPartitionError()).retriable
    assert classify(TimeoutError()).retriable
    assert classify(ConnectionResetError("reset")).retriable
    assert not classify(ValueError("bad")).retriable
    already = PublishFailed(FailureReason.REFUSED, "as is")
    assert classify(already) is already


# ---------------------------------------------------------------------------- hand-over


class _Builder:
    """Stands in for aiokafka's BatchBuilder: holds two records, then is full."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def append(self, *, timestamp: None, key: bytes, value: bytes, headers: Any) -> object | None:
        if len(self.keys) == 2:
            return None
        self.keys.append(key)
        return object()


class _Producer:
    """Stands in for AIOKafkaProducer's batch API; refuses the first batch it is given
    (unless refuse_first is off)."""

    def __init__(self, *, refuse_first: bool = True) -> None:
        self.submitted: list[list[bytes]] = []
        self.calls = 0 if refuse_first else 1

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    def create_batch(self) -> _Builder:
        return _Builder()

    async def send_batch(self, builder: _Builder, topic: str, *, partition: int) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise kafka_errors.KafkaTimeoutError()
        self.submitted.append(builder.keys)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Limits:
    def limit(self, topic: str) -> int:
        return 1_000_000

    async def close(self) -> None:
        pass


class _Directory:
    def partitions(self, topic: str) -> list[int]:
        return [0]

    async def close(self) -> None:
        pass


def _publisher_on(producer: _Producer) -> KafkaPublisher:
    settings = _settings()
    publisher = KafkaPublisher(settings.kafka, settings.kafka_security.resolve())
    stub = cast(Any, publisher)
    stub._producer = producer
    stub._limits = _Limits()  # no broker to ask for topic limits
    stub._topics = _Directory()  # nor for partitions
    stub._builder = lambda producer, size: _Builder()
    return publisher


async def test_kafka_publisher_hands_nothing_over_behind_a_refused_batch() -> None:
    producer = _Producer()
    publisher = _publisher_on(producer)
    records = [OutgoingRecord("orders", b"k", str(i).encode(), []) for i in range(5)]

    results = await publisher.publish(records)
    assert producer.submitted == []  # the later batches of the partition would overtake it
    # The refused batch's two records fail; nothing behind them was handed over.
    assert all(isinstance(r, PublishFailed) and r.retriable for r in results[:2])
    assert "KafkaTimeoutError" in str(results[1])
    assert results[2:] == [HELD] * 3


async def test_kafka_publisher_holds_a_key_that_would_span_two_record_batches() -> None:
    """A key's records of one call travel in one record batch (accepted or refused whole):
    a record whose key already went out in an earlier batch of the call is HELD for the
    next claim, and so is every later record of that key."""
    producer = _Producer(refuse_first=False)
    publisher = _publisher_on(producer)
    keys = [b"a", b"a", b"b", b"a", b"c", b"a"]
    records = [OutgoingRecord("orders", k, str(i).encode(), []) for i, k in enumerate(keys)]

    results = await publisher.publish(records)
    assert producer.submitted == [[b"a", b"a"], [b"b", b"c"]]
    assert results == [ACKED, ACKED, ACKED, HELD, ACKED, HELD]


async def test_memory_publisher_holds_later_records_of_a_refused_key() -> None:
    def refuse_first(record: OutgoingRecord) -> PublishFailed | None:
        return PublishFailed(FailureReason.TIMEOUT, "full") if record.value == b"1" else None

    publisher = MemoryPublisher(refuse=refuse_first)
    records = [
        OutgoingRecord("orders", b"a", b"1", []),
        OutgoingRecord("orders", b"b", b"2", []),
        OutgoingRecord("orders", b"a", b"3", []),
        OutgoingRecord("payments", b"a", b"4", []),
    ]
    results = await publisher.publish(records)
    # Later records of the refused key are not handed over behind it: HELD, not sent.
    assert [isinstance(r, PublishFailed) for r in results] == [True, False, False, False]
    assert results[1:] == [ACKED, HELD, ACKED]
    assert sorted(r.value for r in publisher.sent) == [b"2", b"4"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (kafka_errors.TopicAuthorizationFailedError(), FailureReason.TOPIC_DENIED),
        (kafka_errors.NotEnoughReplicasError(), FailureReason.TOPIC_UNAVAILABLE),
        (kafka_errors.NotEnoughReplicasAfterAppendError(), FailureReason.TOPIC_UNAVAILABLE),
        (kafka_errors.UnknownTopicOrPartitionError(), FailureReason.UNKNOWN_TOPIC),
        (kafka_errors.MessageSizeTooLargeError(), FailureReason.TOO_LARGE),
    ],
)
def test_classify_sorts_topic_errors_by_class(error: Exception, reason: FailureReason) -> None:
    assert classify(error).reason is reason


def _row(attempts: int) -> ClaimedRow:
    return ClaimedRow(1, 0, "e", "orders", "k", "T", b"", "{}", attempts, 0.0, None)


def test_an_uncharged_failure_backs_off_and_never_parks() -> None:
    settings = BatchSettings(max_attempts=3)
    for reason in (FailureReason.TOPIC_DENIED, FailureReason.TOPIC_UNAVAILABLE):
        failure = _failure(_row(50), PublishFailed(reason), settings)
        assert not failure.park, reason
        assert failure.delay_s > 0, reason
    assert _failure(_row(2), PublishFailed(FailureReason.UNKNOWN_TOPIC), settings).park
    assert _failure(_row(0), PublishFailed(FailureReason.TOO_LARGE), settings).park
    assert not FailureReason.BATCH_TOO_LARGE.charged
    assert FailureReason.BATCH_TOO_LARGE.fatal


def test_the_topic_unavailable_metric_names_a_bounded_set_of_topics() -> None:
    observer = RelayObserver()
    topics = [f"missing-{n}" for n in range(MAX_TOPIC_LABELS + 20)]
    observer.batch(BatchOutcome(len(topics), unavailable_by_topic=dict.fromkeys(topics, 1)))
    samples = [
        s
        for metric in observer.metrics.registry.collect()
        if metric.name == "outbox_relay_topic_unavailable"
        for s in metric.samples
        if s.name.endswith("_total")
    ]
    labels = {s.labels["topic"]: s.value for s in samples}
    assert len(labels) == MAX_TOPIC_LABELS + 1
    assert labels["other"] == 20
    assert labels["missing-0"] == 1


def test_classify_a_missing_topic_is_the_rows_not_the_transports() -> None:
    failed = classify(kafka_errors.UnknownTopicOrPartitionError())
    assert failed.retriable
    assert not failed.transport
    assert classify(kafka_errors.KafkaTimeoutError()).transport


# ---------------------------------------------------------------------------- settings names


def test_every_setting_keeps_its_flat_environment_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouping the settings changed no user-facing name: each OUTBOX_* variable lands in
    its group (a renamed field would make its variable an error or be ignored)."""
    env = {
        "OUTBOX_DATABASE_URL": GOOD["database_url"],
        "OUTBOX_KAFKA_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
        "OUTBOX_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
        "OUTBOX_KAFKA_CLIENT_ID": "relay-7",
        "OUTBOX_KAFKA_MAX_BATCH_BYTES": "65536",
        "OUTBOX_TOPIC_PREFIX": "prod.",
        "OUTBOX_TOPIC_MAP": '{"orders": "sales.orders"}',
        "OUTBOX_SHARD_COUNT": "32",
        "OUTBOX_BATCH_SIZE": "250",
        "OUTBOX_PROBE_INTERVAL_S": "0.01",
        "OUTBOX_LEASE_TTL_S": "20",
        "OUTBOX_REPLICA_ID": "r-1",
        "OUTBOX_RETENTION": "keep",
        "OUTBOX_PURGE_BATCH_SIZE": "10",
        "OUTBOX_LISTEN_NOTIFY": "true",
        "OUTBOX_HTTP_PORT": "9999",
        "OUTBOX_GAUGES_INTERVAL_S": "3",
        "OUTBOX_LOG_JSON": "1",
        "OUTBOX_SQLITE_WAIT_FOR_LOCK": "true",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = load_settings(batch_size=300)  # a flag wins over its variable
    assert s.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert s.kafka_security.security_protocol == "PLAINTEXT"
    assert (s.kafka.client_id, s.kafka.max_batch_bytes) == ("relay-7", 65536)
    assert s.topics.kafka_topic("orders") == "prod.sales.orders"
    assert (s.shard_count, s.batch.batch_size, s.probe.interval_s) == (32, 300, 0.01)
    assert (s.leases.lease_ttl_s, s.leases.replica_id) == (20.0, "r-1")
    assert (s.purge.keep, s.purge.purge_batch_size) == (True, 10)
    assert (s.notify.listen_notify, s.http.port, s.gauges.interval_s) == (True, 9999, 3.0)
    assert s.log.json_lines is True
    assert s.database.sqlite_wait_for_lock is True
    assert s.batch_rules().keep is True


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(RelayConfigError, match="kafka_client"):
        load_settings(**GOOD, kafka_client="x")


def test_environment_variables_that_name_no_setting_are_found() -> None:
    env = {
        "OUTBOX_BATCH_SIZE": "10",
        "OUTBOX_BATCHSIZE": "10",  # a typo: the relay would run with the default
        "outbox_kafka_client_id": "x",  # any case, as the settings read them
        "OUTBOX_KAFKA_CLIENTID": "x",
        "PATH": "/bin",
    }
    assert unknown_env_names(env) == ["OUTBOX_BATCHSIZE", "OUTBOX_KAFKA_CLIENTID"]


async def test_a_batch_ack_translates_aiokafka_outcomes_and_expires() -> None:
    """The acks of a call's record batches: aiokafka's result passes, its error arrives
    translated (a size error also makes the topic's limit be read again), a cancelled
    send is the producer's fault, and a batch nobody ever answers fails as fatal after
    the limit, so its shard is not stuck behind it, while the others keep their outcome."""
    loop = asyncio.get_running_loop()
    forgotten: list[str] = []

    def forget(exc: BaseException) -> PublishFailed:
        forgotten.append("orders")
        return classify(exc)

    futures = [loop.create_future() for _ in range(4)]
    ok, too_big, cancelled, never = futures
    acks = _Acks(0.05)
    for n, fut in enumerate(futures):
        acks.add(fut, [2 * n, 2 * n + 1], forget)
    ok.set_result(object())
    too_big.set_exception(kafka_errors.MessageSizeTooLargeError())
    cancelled.cancel()
    results = await acks.wait()
    assert [members for members, _ in results] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    failures = [failed for _, failed in results]
    assert failures[0] is None
    assert isinstance(failures[1], PublishFailed)
    assert not failures[1].retriable
    assert isinstance(failures[2], PublishFailed)
    assert failures[2].reason is FailureReason.PRODUCER_BROKEN
    assert isinstance(failures[3], PublishFailed)
    assert failures[3].fatal
    assert "no ack from Kafka" in str(failures[3])
    assert forgotten == ["orders"]
    never.set_result(object())  # too late: the outcome stands
    await asyncio.sleep(0)
    assert [failed for _, failed in await acks.wait()] == failures


async def test_a_batch_acked_before_the_next_is_added_does_not_end_the_call() -> None:
    """A call submits its batches one by one, awaiting between them: the first may be
    acked before the last is added. The call ends with the last batch's answer."""
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    acks = _Acks(3600.0)
    acks.add(first, [0], classify)
    first.set_result(object())
    await asyncio.sleep(0)  # its callback runs before the next batch is added
    acks.add(second, [1], classify)
    waiting = asyncio.ensure_future(acks.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    second.set_exception(kafka_errors.NotEnoughReplicasError())
    answers = await waiting
    assert answers[0] == ([0], None)
    assert answers[1][0] == [1]
    assert isinstance(answers[1][1], PublishFailed)
    assert answers[1][1].reason is not FailureReason.NO_ACK


def test_a_refused_batch_is_counted_by_the_records_it_held() -> None:
    """What a size refusal halves: the bytes of the records the batch held (key, value,
    headers and each record's overhead), not those of the items it skipped."""
    items = [
        (0, OutgoingRecord("orders", b"k0", b"v" * 10, [("event_id", b"e" * 5)])),
        (3, OutgoingRecord("orders", b"k1", b"v" * 100, [])),  # held, not in the batch
        (4, OutgoingRecord("orders", b"k2", b"v" * 20, [])),
    ]
    held = 2 + 10 + len("event_id") + 5 + 2 + 20
    assert _batch_bytes(items, [0, 4]) == held + 2 * RECORD_OVERHEAD


async def test_the_acks_of_a_call_end_with_its_last_batch() -> None:
    """Every batch answered: the call's acks end then, not at the limit."""
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(3)]
    acks = _Acks(3600.0)
    for n, fut in enumerate(futures):
        acks.add(fut, [n], classify)
    waiting = asyncio.ensure_future(acks.wait())
    for fut in futures[:2]:
        fut.set_result(object())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not waiting.done()
    futures[2].set_result(object())
    assert [failed for _, failed in await waiting] == [None, None, None]
    assert await _Acks(3600.0).wait() == []  # no batch: nothing to wait for


# ---------------------------------------------------------------------------- readiness


@pytest.mark.parametrize("transport", ["kafka", "redis"])
def test_readiness_and_stats_name_the_configured_transport(transport: str, tmp_path: Path) -> None:
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'outbox.db'}",  # never opened here
        kafka_bootstrap_servers="127.0.0.1:9092",
        kafka_security_protocol="PLAINTEXT",
        transport=transport,
    )
    service = RelayService(settings)
    assert service.stats.transport == transport
    service.observer.lease_round(1, 0)
    probe = service.readyz()
    assert not probe.ok
    assert probe.detail == f"{transport}: unreachable or not started"
    service.observer.transport_started()
    assert service.readyz().ok
    service.observer.transport_outage()  # a batch found the transport away
    assert service.readyz().detail == f"{transport}: unreachable or not started"
    assert service.stats.transport_outages == 1


def test_a_claim_is_bytes_full_when_a_shard_s_rows_reached_its_share() -> None:
    """_bytes_full's shortcuts (the whole claim within one share; each shard's row count
    times the largest row within it) never change its answer: against the per-shard sums,
    over claims of many small rows on every shard, a few large ones, one huge one and
    empty payloads."""
    rng = random.Random(7)

    def expected(rows: list[ClaimedRow], share: int) -> bool:
        used: dict[int, int] = {}
        largest: dict[int, int] = {}
        for row in rows:
            used[row.shard] = used.get(row.shard, 0) + len(row.payload)
            largest[row.shard] = max(largest.get(row.shard, 0), len(row.payload))
        return any(used[s] + largest[s] > share for s in used)

    for _ in range(400):
        shards = rng.randint(1, 16)
        sizes = rng.choice([[0], [800], [10, 900], [100, 5_000], [1, 200_000]])
        rows = [
            ClaimedRow(
                i,
                rng.randrange(shards),
                f"e{i}",
                "t",
                "k",
                "T",
                b"x" * rng.choice(sizes),
                "{}",
                0,
                0.0,
                None,
            )
            for i in range(rng.randint(1, 600))
        ]
        per_shard = Counter(row.shard for row in rows)
        total, largest = sum(len(r.payload) for r in rows), max(len(r.payload) for r in rows)
        # Each shortcut's own edge, and one byte either side of it.
        edges = (total + largest, (max(per_shard.values()) + 1) * largest)
        for share in (1, 1_000, 512 * 1024, *(e + d for e in edges for d in (-1, 0, 1))):
            assert _bytes_full(rows, share, per_shard) == expected(rows, share), share
