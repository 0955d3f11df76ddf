"""Kafka's topic-name rule (outbox_core.kafka_names), and that each of its users refuses
exactly what it refuses: the producer's emit, the relay's topic directory and the
consumer's dead-letter topic."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from consumer_lib import ConsumerSettings, ConsumerSettingsError, KafkaSecurity, SettingFault
from outbox_core.kafka_names import MAX_TOPIC_CHARS, legal_topic
from producer_lib import Event, InvalidEvent, Outbox
from relay.transport.aiokafka_adapter import TopicDirectory, TopicState

LEGAL = ["orders", "orders.DLT", "a", "a" * MAX_TOPIC_CHARS, "...", ".hidden", "_-.", "A-Z_0.9"]
HOSTILE = [
    "",
    ".",
    "..",
    "a" * (MAX_TOPIC_CHARS + 1),
    "orders\n",  # a `$` anchor would let a trailing newline through
    "\norders",
    "has space",
    " orders",
    "orders/eu",
    "orders\x00",
    "a\tb",
    "é",
    "ünï",
    "\uff21\uff22\uff23",  # fullwidth ABC: alphanumeric to Unicode, not to Kafka
    "١٢٣",  # Arabic-Indic digits
    "orders;DROP",
    "*",
]


@pytest.mark.parametrize("name", LEGAL)
def test_legal_names(name: str) -> None:
    assert legal_topic(name)


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
def test_hostile_names(name: str) -> None:
    assert not legal_topic(name)


@pytest.mark.parametrize("name", LEGAL + HOSTILE, ids=repr)
def test_every_user_of_the_rule_agrees(name: str) -> None:
    legal = legal_topic(name)
    refused_emit: InvalidEvent | None = None
    try:
        Outbox().prepare(Event(name, "k", "E", {}))
    except InvalidEvent as exc:
        refused_emit = exc
    refused_setting: ConsumerSettingsError | None = None
    try:
        ConsumerSettings(
            bootstrap_servers="k:1",
            group_id="g",
            security=KafkaSecurity.plaintext(),
            dead_letter_topic=name,
        )
    except ConsumerSettingsError as exc:
        refused_setting = exc
    assert (refused_emit is None, refused_setting is None) == (legal, legal)
    if refused_emit is not None:
        assert refused_emit.field == "topic"
    if refused_setting is not None:
        faults = [(p.name, p.fault) for p in refused_setting.problems]
        assert faults == [("dead_letter_topic", SettingFault.INVALID)]


async def test_the_relay_judges_names_by_the_same_rule() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started
    directory = TopicDirectory(producer, name="test lookup", timeout_s=1)
    try:
        for name in HOSTILE:
            assert directory.partitions(name) is TopicState.INVALID, name
        assert directory._task is None  # nothing was looked up
        for name in LEGAL:
            assert directory.partitions(name) is TopicState.LOOKING, name
    finally:
        await directory.close()
        await producer.stop()
