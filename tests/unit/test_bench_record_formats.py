"""bench/record_formats.py without services: what its Debezium comparison counts as equal,
different and unmatched, how rounds alternate the formats, what a drain too small to time
reports, and the arguments it refuses."""

from __future__ import annotations

import pytest

from bench.compare.audit import Audit
from bench.compare.drain import Drain
from bench.formats.debezium_match import Match, Seen, compare, differences
from bench.formats.drains import round_order, unsound
from bench.formats.report import drain_table, match_table
from bench.formats.settings import FORMATS, relay_settings
from bench.record_formats import parse_args

EID = b"6f1c2f7e-9a53-4c1b-8a0e-3f1d5c7b9e21"
RUN_HEADERS = (("__debezium.context.runId", b"run-1"), ("__debezium.context.taskId", b"0"))


def record(
    eid: bytes = EID, key: bytes = "kunde-ü".encode(), value: bytes = b'{"a":1}', **more: bytes
) -> Seen:
    headers = (("id", eid), ("eventType", b"OrderPlaced"), *more.items())
    return Seen("orders", 0, key, value, headers)


@pytest.fixture(autouse=True)
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services the parser requires, named (nothing connects to them here)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")


def test_equal_records_are_equal_whatever_headers_the_relay_adds() -> None:
    dbz = Seen("orders", 1, b"k", b"v", (("id", EID), ("eventType", b"T"), *RUN_HEADERS))
    ours = Seen("orders", 3, b"k", b"v", (("content-type", b"x"), ("eventType", b"T"), ("id", EID)))
    assert differences(dbz, ours) == []
    match = Match(1)
    compare(match, [dbz], [ours])
    assert (match.compared, match.equal, match.differing, match.same_partition) == (1, 1, 0, 0)
    assert match.ok
    assert match.relay_extra_headers == {"content-type"}
    (headers,) = [line for line in match_table(match) if line.startswith("Headers")]
    assert "compared: eventType, id;" in headers
    assert "not compared: __debezium.context.runId, __debezium.context.taskId;" in headers


@pytest.mark.parametrize(
    ("ours", "says"),
    [
        (Seen("payments", 0, "kunde-ü".encode(), b'{"a":1}', (("id", EID), ("eventType", b"OrderPlaced"))), "topic"),
        (record(key=b"kunde-u"), "key"),
        (record(value=b'{"a":2}'), "value: 7 and 7 bytes, first difference at byte 5"),
        (record(value=b'{"a":1} '), "value: 7 and 8 bytes, first difference at byte 7"),
        (Seen("orders", 0, "kunde-ü".encode(), b'{"a":1}', (("id", EID),)), "header eventType"),
        (Seen("orders", 0, "kunde-ü".encode(), b'{"a":1}', (("id", EID), ("eventType", b"orderplaced"))), "header eventType"),
    ],
)  # fmt: skip
def test_each_field_that_differs_is_named(ours: Seen, says: str) -> None:
    found = differences(record(), ours)
    assert len(found) == 1
    assert found[0].startswith(says)
    match = Match(1)
    compare(match, [record()], [ours])
    assert (match.compared, match.equal, match.differing) == (1, 0, 1)
    assert not match.ok
    assert says in match.differences[0]


def test_records_without_a_partner_or_an_id_are_unmatched_and_fail_the_match() -> None:
    other = b"00000000-0000-4000-8000-000000000000"
    no_id = Seen("orders", 0, b"k", b"v", (("eventType", b"T"),))
    match = Match(2)
    compare(match, [record(), record(eid=other)], [record(), no_id, record()])
    assert (match.compared, match.equal) == (1, 1)
    # Debezium's second event is missing on the relay's side; the relay's record without
    # an id and its second record of the same id match nothing.
    assert (match.only_debezium, match.only_relay) == (1, 2)
    assert not match.ok


def test_rounds_alternate_the_order_of_the_formats() -> None:
    assert round_order(FORMATS, 0) == list(FORMATS)
    assert round_order(FORMATS, 1) == list(reversed(FORMATS))
    assert round_order(FORMATS, 2) == list(FORMATS)


def test_each_format_gets_the_settings_it_needs() -> None:
    assert relay_settings("native") == {"OUTBOX_RECORD_FORMAT": "native"}
    assert set(relay_settings("cloudevents-binary")) == {
        "OUTBOX_RECORD_FORMAT",
        "OUTBOX_CLOUDEVENTS_SOURCE",
    }
    assert relay_settings("debezium")["OUTBOX_DEBEZIUM_PLACEMENTS"] == (
        "event_type:header:eventType"
    )


def drain(counted: int, active_s: float, lost: int = 0, distinct: int = 1000) -> Drain:
    audit = Audit(records=distinct, distinct=distinct, lost=lost, unpublished=0, order_violations=0)
    return Drain("x", 1000, 1000, True, 0.1, active_s, counted, 0.1, 0.2, 1, audit=audit)


def test_ratios_and_the_bar_come_from_the_same_rounds() -> None:
    table = "\n".join(
        drain_table(
            {
                "native": [drain(1000, 1.0), drain(1000, 0.5)],
                "debezium": [drain(1000, 1.5), drain(1000, 0.5)],
            }
        )
    )
    assert "| debezium |" in table
    assert "missed, lowest debezium at 0.89" in table  # medians 1,333 against 1,500


def test_a_drain_too_small_to_time_reports_no_ratio_and_judges_no_bar() -> None:
    table = "\n".join(drain_table({"native": [drain(0, 0.0)], "debezium": [drain(0, 0.0)]}))
    assert "n/a" in table
    assert "bar: not judged" in table


def test_a_drain_that_lost_or_missed_events_is_named() -> None:
    drains = {"native": [drain(10, 1.0)], "debezium": [drain(10, 1.0, lost=1, distinct=999)]}
    assert unsound(drains, 1000) == ["debezium"]
    assert unsound({"native": [drain(10, 1.0)]}, 1000) == []


def test_native_always_drains_and_formats_keep_their_order() -> None:
    args = parse_args(["--formats", "debezium,cloudevents-binary"])
    assert args.formats == ["native", "cloudevents-binary", "debezium"]
    assert parse_args([]).formats == list(FORMATS)
    assert parse_args([]).parts == ["compare", "drain"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--formats", "avro"],
        ["--formats", "NATIVE"],
        ["--parts", ""],
        ["--parts", "compare,latency"],
        ["--compare-events", "0"],
        ["--events", "999"],
        ["--rounds", "0"],
    ],
)
def test_what_the_bench_cannot_run_is_refused_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert "--" in capsys.readouterr().err
