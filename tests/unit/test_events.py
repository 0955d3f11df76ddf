"""Validation and serialization, without a database (the same code runs before every emit)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pydantic
import pytest

from outbox_core.sharding import DEFAULT_LOCK_NAMESPACE, lock_key, shard_for
from producer_lib import (
    ConfigurationError,
    Event,
    InvalidEvent,
    InvalidHeader,
    Outbox,
    PayloadTooLarge,
    SerializationError,
    Serialized,
)


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: uuid.UUID
    placed: dt.datetime
    total: decimal.Decimal
    lines: list[Line]
    color: Color


def test_json_handles_models_dataclasses_and_scalars() -> None:
    order = Order(
        id=uuid.UUID(int=1),
        placed=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        total=decimal.Decimal("9.99"),
        lines=[Line("a", 2)],
        color=Color.RED,
    )
    row = Outbox().prepare(Event("orders", "1", "OrderPlaced", order))
    assert json.loads(row.payload) == {
        "id": "00000000-0000-0000-0000-000000000001",
        "placed": "2026-01-02T03:04:05Z",
        "total": "9.99",
        "lines": [{"sku": "a", "qty": 2}],
        "color": "red",
    }
    assert row.headers["content-type"] == "application/json"
    plain = Outbox().prepare(
        Event("orders", "1", "E", {"at": dt.date(2026, 1, 2), "l": Line("b", 1)})
    )
    assert json.loads(plain.payload) == {"at": "2026-01-02", "l": {"sku": "b", "qty": 1}}


def test_bytes_pass_through() -> None:
    row = Outbox().prepare(Event("orders", "1", "E", b"\x00\xffraw"))
    assert row.payload == b"\x00\xffraw"
    assert row.headers["content-type"] == "application/octet-stream"


def test_pluggable_serializer() -> None:
    def upper(payload: object) -> Serialized:
        return Serialized(str(payload).upper().encode(), "text/plain")

    row = Outbox(serializer=upper).prepare(Event("orders", "1", "E", "hello"))
    assert (row.payload, row.headers["content-type"]) == (b"HELLO", "text/plain")


def test_serializer_failures_become_serialization_error() -> None:
    def broken(payload: object) -> Serialized:
        raise RuntimeError("nope")

    with pytest.raises(SerializationError, match="nope"):
        Outbox(serializer=broken).prepare(Event("orders", "1", "E", {}))
    with pytest.raises(SerializationError, match="not Serialized"):
        Outbox(serializer=lambda p: b"x").prepare(Event("orders", "1", "E", {}))  # type: ignore[arg-type]


def test_size_limit_counts_payload_and_headers() -> None:
    outbox = Outbox(max_event_bytes=2048)
    outbox.prepare(Event("orders", "1", "E", {"x": "a" * 1500}))
    with pytest.raises(PayloadTooLarge) as info:
        outbox.prepare(Event("orders", "1", "E", {"x": "a" * 1500}, headers={"h": "b" * 600}))
    assert info.value.limit == 2048
    assert info.value.size > 2048


@pytest.mark.parametrize(
    "headers",
    [{"traceparent": "x"}, {"Content-Type": "x"}, {"outbox-internal": "x"}, {"": "x"}, {"a": b"x"}],
)
def test_bad_headers(headers: dict[str, object]) -> None:
    with pytest.raises(InvalidHeader):
        Outbox().prepare(Event("orders", "1", "E", {}, headers=headers))  # type: ignore[arg-type]


VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "key_routing.json").read_text("utf-8")
)


def test_sharding_is_stable_and_in_range() -> None:
    # Fixed values: producers in other processes and the relay must compute the same.
    assert shard_for("order-42", 16) == shard_for("order-42", 16)
    assert [shard_for(f"k{i}", 16) for i in range(5)] == [shard_for(f"k{i}", 16) for i in range(5)]
    assert all(0 <= shard_for(f"k{i}", 7) < 7 for i in range(1000))
    assert shard_for("abc", 16) == 0x352441C2 % 16  # crc32("abc")
    assert -(2**31) <= lock_key("orders", "k") < 2**31


@pytest.mark.parametrize(
    "vector", VECTORS["shard_for"], ids=lambda v: f"{v['key'][:12]!r}-{v['shard_count']}"
)
def test_shard_for_gives_the_known_answers_every_producer_must(vector: dict[str, Any]) -> None:
    assert shard_for(vector["key"], vector["shard_count"]) == vector["shard"]


@pytest.mark.parametrize(
    "vector", VECTORS["lock_key"], ids=lambda v: f"{v['topic'][:10]!r}-{v['key'][:10]!r}"
)
def test_lock_key_gives_the_known_answers_every_producer_must(vector: dict[str, Any]) -> None:
    assert lock_key(vector["topic"], vector["key"]) == vector["lock_key"]


def test_the_vectors_follow_their_own_description() -> None:
    """The vectors are what their description says, computed here without outbox_core: a
    table-driven CRC-32 (the standard check value first) and BLAKE2b from hashlib."""

    def crc32(data: bytes) -> int:
        crc = 0xFFFFFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
        return crc ^ 0xFFFFFFFF

    assert crc32(b"123456789") == 0xCBF43926
    for v in VECTORS["shard_for"]:
        assert crc32(v["key"].encode("utf-8")) % v["shard_count"] == v["shard"], v
    for v in VECTORS["lock_key"]:
        data = v["topic"].encode("utf-8") + b"\x00" + v["key"].encode("utf-8")
        digest = hashlib.blake2b(data, digest_size=4).digest()
        assert int.from_bytes(digest, "big", signed=True) == v["lock_key"], v
    assert "pg_advisory_xact_lock(2828" in VECTORS["description"]
    assert DEFAULT_LOCK_NAMESPACE == 2828


@pytest.mark.parametrize(
    "settings",
    [
        {"shard_count": 0},
        {"shard_count": 40000},
        {"max_event_bytes": 10},
        {"idempotency_scope": ""},
        {"idempotency_scope": "s" * 256},  # MariaDB's column holds 255
        {"idempotency_scope": 7},
    ],
)
def test_bad_settings(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Outbox(**settings)  # type: ignore[arg-type]


def test_tenant_is_optional_validated_and_part_of_the_idempotent_body() -> None:
    outbox = Outbox()
    assert outbox.prepare(Event("orders", "1", "E", {})).tenant is None
    assert outbox.prepare(Event("orders", "1", "E", {}, tenant="acme")).tenant == "acme"
    for bad in ("", " ", "t" * 256, 3):
        with pytest.raises(InvalidEvent) as info:
            outbox.prepare(Event("orders", "1", "E", {}, tenant=bad))  # type: ignore[arg-type]
        assert info.value.field == "tenant"
    keyed = [
        outbox.prepare(Event("orders", "1", "E", {}, idempotency_key="k", tenant=t))
        for t in (None, "acme", "globex", None)
    ]
    hashes = [row.body_hash for row in keyed]
    # Another tenant is another body; no tenant hashes as before tenants existed.
    assert len(set(hashes)) == 3
    assert hashes[0] == hashes[3]
