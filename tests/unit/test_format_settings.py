"""The record format settings (relay/transport/format_settings.py): defaults, the
environment and the flags, and every hostile value refused at load with the setting it
concerns and what is wrong with it (SettingFault), never the value."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from outbox_core.settings import SettingFault
from relay.cli import _run_overrides, build_parser
from relay.config import load_settings
from relay.errors import RelayConfigError, RelaySettingsError
from relay.transport.format_settings import Placement, RecordFormat

GOOD: dict[str, Any] = {
    "database_url": "postgresql://relay:secret-pw@db.internal:5432/outbox",
    "kafka_bootstrap_servers": "127.0.0.1:9092",
    "kafka_security_protocol": "PLAINTEXT",
}
SOURCE = {"cloudevents_source": "/orders-service"}


def test_the_default_is_native_for_every_topic() -> None:
    settings = load_settings(**GOOD)
    assert settings.formats.format_of("orders") is RecordFormat.NATIVE
    assert settings.formats.placements() == (Placement("event_type", "eventType"),)
    assert settings.batch_rules().shape_of("orders") is None


def test_a_topic_overrides_the_default() -> None:
    settings = load_settings(
        **GOOD,
        **SOURCE,
        record_format="debezium",
        record_formats={"orders": "cloudevents-binary", "audit": "native"},
    )
    formats = settings.formats
    assert formats.format_of("orders") is RecordFormat.CLOUDEVENTS_BINARY
    assert formats.format_of("audit") is RecordFormat.NATIVE
    assert formats.format_of("other") is RecordFormat.DEBEZIUM
    rules = settings.batch_rules()
    assert rules.shape_of("audit") is None
    assert type(rules.shape_of("orders")).__name__ == "CloudEventsBinary"
    assert type(rules.shape_of("other")).__name__ == "DebeziumOutbox"


def test_the_environment_and_the_flags_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in GOOD.items():
        monkeypatch.setenv(f"OUTBOX_{name.upper()}", value)
    monkeypatch.setenv("OUTBOX_RECORD_FORMAT", "cloudevents-structured")
    monkeypatch.setenv("OUTBOX_RECORD_FORMATS", '{"audit": "debezium"}')
    monkeypatch.setenv("OUTBOX_CLOUDEVENTS_SOURCE", "https://example.com/orders")
    monkeypatch.setenv("OUTBOX_DEBEZIUM_ID_HEADER", "eventId")
    monkeypatch.setenv("OUTBOX_DEBEZIUM_PLACEMENTS", "event_type:header:type,tenant:header")
    formats = load_settings().formats
    assert formats.record_format is RecordFormat.CLOUDEVENTS_STRUCTURED
    assert formats.format_of("audit") is RecordFormat.DEBEZIUM
    assert formats.cloudevents_source == "https://example.com/orders"
    assert formats.debezium_id_header == "eventId"
    assert formats.placements() == (Placement("event_type", "type"), Placement("tenant", "tenant"))

    parser = build_parser()
    args = parser.parse_args(
        ["run", "--record-format", "native", "--record-formats", '{"x": "cloudevents-binary"}']
    )
    flagged = load_settings(**_run_overrides(args)).formats  # flags win over the environment
    assert flagged.record_format is RecordFormat.NATIVE
    assert flagged.format_of("x") is RecordFormat.CLOUDEVENTS_BINARY


def test_help_shows_every_format_setting() -> None:
    text = build_parser().format_help() + "".join(
        action.format_help()
        for action in build_parser()._subparsers._group_actions  # type: ignore[union-attr]
        for action in action.choices.values()  # type: ignore[union-attr]
    )
    for flag in (
        "--record-format",
        "--record-formats",
        "--cloudevents-source",
        "--debezium-id-header",
        "--debezium-placements",
    ):
        assert flag in text


F = SettingFault
HOSTILE: list[tuple[dict[str, Any], str, SettingFault, str]] = [
    ({"record_format": "avro"}, "record_format", F.NOT_A_CHOICE, "native"),
    ({"record_format": "NATIVE"}, "record_format", F.NOT_A_CHOICE, "native"),
    ({"record_format": ""}, "record_format", F.NOT_A_CHOICE, "native"),
    ({"record_format": 3}, "record_format", F.NOT_A_CHOICE, "native"),
    ({"record_formats": {"orders": "xml"}}, "record_formats", F.NOT_A_CHOICE, "debezium"),
    ({"record_formats": ["orders"]}, "record_formats", F.WRONG_TYPE, "dictionary"),
    ({"record_formats": "orders=native"}, "record_formats", F.WRONG_TYPE, "dictionary"),
    ({"record_formats": {"orders": None}}, "record_formats", F.NOT_A_CHOICE, "native"),
    ({"record_format": "cloudevents-binary"}, "cloudevents_source", F.MISSING, "required"),
    (
        {"record_formats": {"o": "cloudevents-structured"}},
        "cloudevents_source",
        F.MISSING,
        "OUTBOX_CLOUDEVENTS_SOURCE",
    ),
    ({"cloudevents_source": ""}, "cloudevents_source", F.INVALID, "URI-reference"),
    ({"cloudevents_source": "/a b"}, "cloudevents_source", F.INVALID, "URI-reference"),
    ({"cloudevents_source": "/a\x00"}, "cloudevents_source", F.INVALID, "URI-reference"),
    ({"cloudevents_source": "/a\n"}, "cloudevents_source", F.INVALID, "URI-reference"),
    ({"cloudevents_source": "/a\x7f"}, "cloudevents_source", F.INVALID, "URI-reference"),
    ({"cloudevents_source": 5}, "cloudevents_source", F.WRONG_TYPE, "string"),
    ({"debezium_id_header": ""}, "debezium_id_header", F.INVALID, "non-empty"),
    ({"debezium_id_header": "i\x00d"}, "debezium_id_header", F.INVALID, "NUL"),
    (
        {"debezium_placements": "event_type:envelope:type"},
        "debezium_placements",
        F.INVALID,
        "only header",
    ),
    (
        {"debezium_placements": "event_type:partition"},
        "debezium_placements",
        F.INVALID,
        "only header",
    ),
    ({"debezium_placements": "payload:header:p"}, "debezium_placements", F.INVALID, "column"),
    ({"debezium_placements": "event_type"}, "debezium_placements", F.INVALID, "column:header"),
    (
        {"debezium_placements": "event_type:head:x"},
        "debezium_placements",
        F.INVALID,
        "column:header",
    ),
    ({"debezium_placements": "event_type:header:a\x00"}, "debezium_placements", F.INVALID, "NUL"),
    (
        {"debezium_placements": "event_type:header:id"},
        "debezium_placements",
        F.INVALID,
        "same name",
    ),
    (
        {"debezium_placements": "topic:header:T,tenant:header:t"},
        "debezium_placements",
        F.INVALID,
        "same name",
    ),
]


@pytest.mark.parametrize(("override", "name", "fault", "message"), HOSTILE)
def test_a_hostile_format_setting_is_refused_at_load(
    override: dict[str, Any], name: str, fault: SettingFault, message: str
) -> None:
    with pytest.raises(RelaySettingsError) as info:
        load_settings(**GOOD, **override)
    assert (name, fault) in [(p.name, p.fault) for p in info.value.problems]
    text = str(info.value)
    assert f"OUTBOX_{name.upper()}" in text
    assert message in text
    assert "secret-pw" not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize("fmt", [f for f in RecordFormat if f is not RecordFormat.NATIVE])
def test_redis_refuses_every_format_but_native(fmt: RecordFormat) -> None:
    redis = {"database_url": GOOD["database_url"], "transport": "redis", **SOURCE}
    for override in ({"record_format": fmt}, {"record_formats": {"orders": fmt}}):
        with pytest.raises(RelayConfigError, match=r"OUTBOX_RECORD_FORMAT.*transport=redis"):
            load_settings(**redis, **override)
    settings = load_settings(**redis, record_formats={"orders": "native"})
    assert settings.formats.in_use() == {RecordFormat.NATIVE}
