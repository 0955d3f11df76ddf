"""ConsumerSettings accepts and refuses the same values whichever way they come: written in
code, ConsumerSettings(...), or as text from the environment and `outbox-consumer run`
flags, ConsumerSettings.from_env(...). Each case of the table is checked all three ways,
with the same verdict and, when refused, the same settings refused for the same
SettingFault."""

from __future__ import annotations

import math
from typing import Any

import pytest

from consumer_lib import ConsumerSettings, ConsumerSettingsError, KafkaSecurity, SettingFault
from consumer_lib.environment import set_flags

pytestmark = pytest.mark.usefixtures("clean_consumer_env")

BASE: dict[str, Any] = {
    "bootstrap_servers": "kafka:9092",
    "group_id": "g",
    "kafka_security_protocol": "PLAINTEXT",
}
OK = None
RANGE = SettingFault.OUT_OF_RANGE
TYPE = SettingFault.WRONG_TYPE
FINITE = SettingFault.NOT_FINITE
CHOICE = SettingFault.NOT_A_CHOICE
INVALID = SettingFault.INVALID

COUNTS = (
    "max_attempts",
    "max_concurrent_partitions",
    "max_records",
    "batch_max_records",
    "batch_max_bytes",
    "purge_batch_size",
)
COUNT_CASES: list[tuple[Any, SettingFault | None]] = [
    (1, OK),
    (2**31 - 1, OK),
    ("7", OK),
    (0, RANGE),
    (-1, RANGE),
    (2**31, RANGE),
    ("9" * 400, RANGE),
    (1.5, TYPE),
    (True, TYPE),  # a bool is no count, in code as in the environment ("True")
    ("abc", TYPE),
    ("", TYPE),
    ("nan", TYPE),
    ([1], TYPE),
]
DURATIONS = (
    "backoff_base_s",
    "backoff_max_s",
    "retention_s",
    "purge_interval_s",
    "lag_interval_s",
    "stall_after_s",
)
TEN_YEARS = 10 * 365 * 24 * 3600.0
DURATION_CASES: list[tuple[Any, SettingFault | None]] = [
    (0.5, OK),
    (3, OK),
    (TEN_YEARS, OK),
    (0, RANGE),
    (0.0, RANGE),
    (-1, RANGE),
    (TEN_YEARS + 1, RANGE),
    (1e300, RANGE),
    (math.nan, FINITE),
    (math.inf, FINITE),
    (-math.inf, FINITE),
    (True, TYPE),
    ("abc", TYPE),
    ("", TYPE),
    ([1], TYPE),
]
SHUTDOWN_CASES: list[tuple[Any, SettingFault | None]] = [
    (0, OK),  # stop at once: a choice, unlike a wait of 0 in a loop
    (0.5, OK),
    (-0.1, RANGE),
    (TEN_YEARS + 1, RANGE),
    (math.nan, FINITE),
    (math.inf, FINITE),
    (True, TYPE),
    ("", TYPE),
]
TEXT_CASES: list[tuple[Any, SettingFault | None]] = [
    ("x", OK),
    ("", INVALID),
    ("   ", INVALID),
    ("\t\n", INVALID),
]
NAME_CASES = [*TEXT_CASES, ("x" * 255, OK), ("x" * 256, RANGE)]
TOPIC_CASES: list[tuple[Any, SettingFault | None]] = [
    ("orders.DLT", OK),
    ("a" * 249, OK),
    ("", INVALID),
    (".", INVALID),
    ("..", INVALID),
    ("a" * 250, INVALID),
    ("orders dlt", INVALID),
    ("orders/dlt", INVALID),
    ("orders.DLT\n", INVALID),
    ("\uff24\uff2c\uff34", INVALID),  # fullwidth DLT
]
BOOL_CASES: list[tuple[Any, SettingFault | None]] = [
    ("true", OK),
    ("false", OK),
    ("0", OK),
    ("perhaps", TYPE),
    ("", TYPE),
    ("2", TYPE),
]

CASES: list[tuple[str, Any, SettingFault | None]] = [
    *((name, value, fault) for name in COUNTS for value, fault in COUNT_CASES),
    *((name, value, fault) for name in DURATIONS for value, fault in DURATION_CASES),
    *(("shutdown_grace_s", value, fault) for value, fault in SHUTDOWN_CASES),
    *(("bootstrap_servers", value, fault) for value, fault in TEXT_CASES),
    *(("http_host", value, fault) for value, fault in TEXT_CASES),
    *(("group_id", value, fault) for value, fault in NAME_CASES),
    *(("client_id", value, fault) for value, fault in NAME_CASES),
    *(("dead_letter_topic", value, fault) for value, fault in TOPIC_CASES),
    *(
        (name, value, fault)
        for name in ("debezium_id_header", "debezium_type_header")
        for value, fault in [*NAME_CASES, ("eventType", OK), ("ce_id", OK)]
    ),
    *(
        (name, value, fault)
        for name in ("batch", "create_dead_letter_topics", "kafka_ssl_check_hostname")
        for value, fault in BOOL_CASES
    ),
    ("missing_event_id", "process", OK),
    ("missing_event_id", "bogus", CHOICE),
    ("missing_event_id", "", CHOICE),
    ("missing_event_id", "PROCESS", CHOICE),
    ("unhandled", "dead_letter", OK),
    ("isolation_level", "read_uncommitted", OK),
    ("isolation_level", "read-committed", CHOICE),
    ("isolation_level", "", CHOICE),
    ("unhandled", "process", CHOICE),
    ("http_port", 0, OK),
    ("http_port", 65535, OK),
    ("http_port", -1, RANGE),
    ("http_port", 65536, RANGE),
    ("http_port", "", TYPE),
    ("http_port", "80.5", TYPE),
    ("http_port", True, TYPE),
    ("kafka_security_protocol", "SSL", OK),
    ("kafka_security_protocol", "plaintext", CHOICE),
    ("kafka_security_protocol", "", CHOICE),
    ("kafka_sasl_mechanism", "MD5", CHOICE),
]

Verdict = tuple[tuple[str | None, SettingFault], ...] | ConsumerSettings


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _verdict(make: Any, **values: Any) -> Verdict:
    try:
        settings = make(**values)
    except ConsumerSettingsError as exc:
        return tuple(sorted(((p.name, p.fault) for p in exc.problems), key=str))
    assert isinstance(settings, ConsumerSettings)
    return settings


def _three_ways(monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> list[Verdict]:
    in_code = _verdict(ConsumerSettings, **{**BASE, name: value})
    monkeypatch.setenv(f"OUTBOX_CONSUMER_{name.upper()}", _text(value))
    from_env = _verdict(ConsumerSettings.from_env, **BASE)
    monkeypatch.delenv(f"OUTBOX_CONSUMER_{name.upper()}")
    set_flags({name: _text(value)})
    from_flag = _verdict(ConsumerSettings.from_env, **BASE)
    set_flags({})
    return [in_code, from_env, from_flag]


@pytest.mark.parametrize(("name", "value", "fault"), CASES, ids=repr)
def test_code_environment_and_flags_agree(
    monkeypatch: pytest.MonkeyPatch, name: str, value: Any, fault: SettingFault | None
) -> None:
    in_code, from_env, from_flag = _three_ways(monkeypatch, name, value)
    assert in_code == from_env == from_flag
    if fault is None:
        assert isinstance(in_code, ConsumerSettings)
    else:
        assert in_code == ((name, fault),)


def test_every_setting_has_a_case() -> None:
    from consumer_lib.environment import settings_fields

    untested = {
        "kafka_ssl_cafile",  # paths: their checks are the security group's (below)
        "kafka_ssl_certfile",
        "kafka_ssl_keyfile",
        "kafka_ssl_key_password",
        "kafka_ssl_key_password_file",
        "kafka_sasl_username",
        "kafka_sasl_password",
        "kafka_sasl_password_file",
    }
    assert {f.name for f in settings_fields()} - untested <= {name for name, _, _ in CASES}


SECURITY_CASES = [
    KafkaSecurity.plaintext(),
    KafkaSecurity(protocol="SSL"),
    KafkaSecurity(protocol="SSL", ssl_check_hostname=False),
    KafkaSecurity(
        protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"
    ),
    KafkaSecurity(),  # no protocol chosen
    KafkaSecurity(protocol="SASL_SSL"),  # no credentials
    KafkaSecurity(protocol="PLAINTEXT", sasl_username="u"),  # SASL without SASL
    KafkaSecurity(protocol="SSL", ssl_certfile="/no/such.pem", ssl_keyfile="/no/such.key"),
]


@pytest.mark.parametrize("security", SECURITY_CASES, ids=repr)
def test_a_kafka_security_object_is_its_flat_settings(
    monkeypatch: pytest.MonkeyPatch, security: KafkaSecurity
) -> None:
    plain = {"bootstrap_servers": "kafka:9092", "group_id": "g"}
    in_code = _verdict(ConsumerSettings, security=security, **plain)
    values = security.settings_values().items()
    flat = {f"kafka_{name}": value for name, value in values if value is not None}
    for name, value in flat.items():
        monkeypatch.setenv(f"OUTBOX_CONSUMER_{name.upper()}", _text(value))
    from_env = _verdict(ConsumerSettings.from_env, **plain)
    assert in_code == from_env
    if isinstance(in_code, ConsumerSettings):
        assert in_code.security == security


def test_security_given_twice_is_refused() -> None:
    with pytest.raises(ConsumerSettingsError) as err:
        ConsumerSettings(security=KafkaSecurity.plaintext(), **BASE)
    assert [(p.name, p.fault) for p in err.value.problems] == [(None, INVALID)]


@pytest.mark.parametrize("name", ["debezium_id_header", "debezium_type_header"])
def test_a_header_name_with_nul_is_refused(name: str) -> None:
    """No environment variable or flag can hold NUL: in code only."""
    assert _verdict(ConsumerSettings, **{**BASE, name: "id\x00"}) == ((name, INVALID),)
