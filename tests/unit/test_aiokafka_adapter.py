"""The aiokafka internals the relay relies on (relay/transport/aiokafka_adapter.py), checked
against the installed aiokafka, which is the version constraints.txt pins: an upgrade that
moves or changes them fails here, before a relay builds a wrong record batch. The whole
publisher runs against real Kafka in tests/integration/test_publisher_conformance.py."""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.record.default_records import DefaultRecordBatch

from relay.transport.aiokafka_adapter import (
    TRANSACTION_RETRY_S,
    BatchBuilder,
    TopicDirectory,
    TopicState,
    add_to_transaction,
    quick_transaction_retries,
    read_left_failures,
    record_batch,
    transaction_failure,
    transaction_partitions,
)

ROOT = Path(__file__).resolve().parents[2]


def pinned(package: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, pin = line.partition("==")
        if name.strip().lower() == package:
            return pin.split(";")[0].strip()
    raise AssertionError(f"{package} is not pinned in constraints.txt")


def test_the_installed_aiokafka_is_the_pinned_one() -> None:
    # What the tests below verify is this version; CI installs it from constraints.txt.
    assert version("aiokafka") == pinned("aiokafka")


@pytest.mark.parametrize(
    ("compression", "codec"),
    [(None, DefaultRecordBatch.CODEC_NONE), ("gzip", DefaultRecordBatch.CODEC_GZIP)],
)
async def test_a_record_batch_has_the_size_asked_for_and_the_producers_compression(
    compression: str | None, codec: int
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers="127.0.0.1:1", compression_type=compression, enable_idempotence=True
    )  # never started: the adapter reads only its configuration
    try:
        batch = record_batch(producer, 2048)
        assert isinstance(batch, BatchBuilder)
        appended = 0
        while batch.append(timestamp=None, key=b"k", value=b"v" * 100, headers=[("h", b"1")]):
            appended += 1
        assert 5 < appended < 30  # full near 2 KiB (compression counts the raw size)
        assert batch.append(timestamp=None, key=b"k", value=b"v", headers=[]) is None  # closed
        built = DefaultRecordBatch(bytes(batch._build()))
        assert built.compression_type == codec
        records = list(built)
        assert len(records) == appended
        assert (records[0].key, records[0].value, records[0].headers) == (
            b"k",
            b"v" * 100,
            [("h", b"1")],
        )
    finally:
        await producer.stop()


def test_the_public_calls_the_publisher_makes_are_still_there() -> None:
    for name in ("partitions_for", "send_batch", "start", "stop"):
        assert inspect.iscoroutinefunction(getattr(AIOKafkaProducer, name)), name
    assert list(inspect.signature(AIOKafkaProducer.send_batch).parameters) == [
        "self",
        "batch",
        "topic",
        "partition",
    ]
    assert {"append", "close"} <= set(vars(BatchBuilder))


async def test_the_client_internals_the_topic_directory_reads_are_still_there() -> None:
    # TopicDirectory (relay/transport/aiokafka_adapter.py) answers from the producer's
    # metadata without waiting and looks topics up through the client: these are what it
    # touches. Its behaviour against a real broker: tests/integration/test_relay_topics.py.
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started
    try:
        client = producer.client
        cluster = client.cluster
        assert cluster.partitions_for_topic("never-seen") is None
        assert isinstance(cluster.unauthorized_topics, set)
        assert isinstance(client._topics, set)
        for name in ("add_topic", "set_topics", "force_metadata_update"):
            assert callable(getattr(client, name)), name
            assert not inspect.iscoroutinefunction(getattr(client, name)), name  # futures
        assert list(inspect.signature(client.add_topic).parameters) == ["topic"]
        assert list(inspect.signature(client.set_topics).parameters) == ["topics"]
    finally:
        await producer.stop()


async def test_a_topic_name_kafka_refuses_is_invalid_without_a_lookup() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started
    directory = TopicDirectory(producer, name="test lookup", timeout_s=1)
    try:
        for name in ("has space", "slash/ed", "", ".", "..", "x" * 250, "ünï"):
            assert directory.partitions(name) is TopicState.INVALID, name
        assert directory._task is None  # nothing was looked up
        assert directory.partitions("fine.name-1_x") is TopicState.LOOKING
        assert directory._task is not None  # a lookup beside the caller
    finally:
        await directory.close()
        await producer.stop()


async def test_a_transactional_producers_batches_carry_the_transactional_flag() -> None:
    plain = AIOKafkaProducer(bootstrap_servers="localhost:1")
    transactional = AIOKafkaProducer(bootstrap_servers="localhost:1", transactional_id="t")
    for producer, flag in ((plain, False), (transactional, True)):
        batch = record_batch(producer, 1024)
        batch.append(timestamp=None, key=b"k", value=b"v", headers=[])
        assert DefaultRecordBatch(bytes(batch._build())).is_transactional is flag


async def test_partitions_added_ahead_are_the_transactions_and_asked_for_at_once() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="localhost:1", transactional_id="t")
    txn = producer._txn_manager
    assert transaction_partitions(producer) == frozenset()
    txn.set_pid_and_epoch(1, 0)  # what start() and begin_transaction() do, without a broker
    txn.begin_transaction()
    woken = txn.make_task_waiter()
    wanted = frozenset({TopicPartition("orders", 1), TopicPartition("progress", 0)})
    add_to_transaction(producer, wanted)
    assert woken.done()  # the sender wakes to ask the coordinator
    assert txn.partitions_to_add() == wanted
    assert transaction_partitions(producer) == wanted
    txn.partition_added(TopicPartition("orders", 1))
    assert transaction_partitions(producer) == wanted


async def test_a_producer_whose_sender_stopped_on_a_fence_names_the_fence() -> None:
    """aiokafka's sender stops on ProducerFenced (an AddPartitionsToTxn answered with a
    newer epoch) and puts the transaction manager in its fatal state, where sends are
    refused and an abort fails its assertion: the adapter names the fence."""
    producer = AIOKafkaProducer(bootstrap_servers="localhost:1", transactional_id="t")
    txn = producer._txn_manager
    txn.set_pid_and_epoch(1, 0)
    txn.begin_transaction()
    assert transaction_failure(producer) is None  # open and well
    txn.fatal_error(kafka_errors.ProducerFenced())  # what the stopped sender calls
    assert isinstance(transaction_failure(producer), kafka_errors.ProducerFenced)
    # A send then is refused with IllegalOperation (after the topic's metadata, so read in
    # the source here), which outbox_core.kafka_faults calls NOT_IN_TRANSACTION.
    source = inspect.getsource(AIOKafkaProducer.send_batch)
    assert "raise IllegalOperation" in source
    assert "is_in_transaction()" in source
    with pytest.raises(AssertionError):
        await producer.abort_transaction()
    plain = AIOKafkaProducer(bootstrap_servers="localhost:1")
    assert transaction_failure(plain) is None


async def test_the_failures_a_stopped_sender_leaves_are_read() -> None:
    """A sender stopped by a fence fails every batch it still held, and the transaction;
    nobody awaits a batch's drain waiter, so unread its error would be logged as never
    retrieved (asyncio's flag on the future) once collected."""
    producer = AIOKafkaProducer(bootstrap_servers="localhost:1", transactional_id="t")
    txn = producer._txn_manager
    txn.set_pid_and_epoch(1, 0)
    txn.begin_transaction()
    accumulator = producer._message_accumulator
    batch = record_batch(producer, 1024)
    batch.append(timestamp=None, key=b"k", value=b"v", headers=[])
    await accumulator.add_batch(batch, TopicPartition("orders", 0), 1.0)
    (held,) = accumulator._batches[TopicPartition("orders", 0)]
    fenced = kafka_errors.ProducerFenced()
    accumulator.fail_all(fenced)  # what the stopped sender's callback does
    txn.fatal_error(fenced)
    unread = [held.future, held._drain_waiter, txn.wait_for_transaction_end()]
    assert all(f._log_traceback for f in unread)
    read_left_failures(producer)
    assert not any(f._log_traceback for f in unread)


def test_the_wait_after_concurrent_transactions_is_the_constant_the_relay_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiokafka.producer import sender

    # The handler of AddPartitionsToTxn returns the module's BACKOFF_OVERRIDE, read when
    # it answers: setting the constant is what changes the wait.
    source = inspect.getsource(sender.AddPartitionsToTxnHandler.handle_response)
    assert "return BACKOFF_OVERRIDE" in source
    monkeypatch.setattr(sender, "BACKOFF_OVERRIDE", sender.BACKOFF_OVERRIDE)
    quick_transaction_retries()
    assert sender.BACKOFF_OVERRIDE == TRANSACTION_RETRY_S
