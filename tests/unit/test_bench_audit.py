"""The relay comparison's arithmetic, without services: the topic audit's tally (what counts
as a duplicate and as an order violation) and the pipeline ceiling of each retention mode."""

from __future__ import annotations

import json

import pytest

from bench.compare.audit import Tally, seq_of
from bench.compare.drain import Drain
from bench.compare.targets import pipeline_ceilings, vs_pipeline


def payload(seq: int) -> bytes:
    # producer_lib's JsonSerializer: compact separators, keys in insertion order.
    return json.dumps({"seq": seq, "order_id": seq}, separators=(",", ":")).encode()


def test_seq_is_read_from_the_compact_payload_and_from_any_other_json() -> None:
    assert seq_of(payload(123456)) == 123456
    assert seq_of(b'{"order_id": 1, "seq": 7}') == 7
    # A CloudEvents structured envelope carries the payload as its data.
    assert seq_of(b'{"specversion":"1.0","id":"x","data":' + payload(42) + b"}") == 42


def test_duplicates_do_not_count_as_order_violations_and_a_late_first_seen_seq_does() -> None:
    tally = Tally()
    tally.add(
        [
            (b"a", payload(0)),
            (b"a", payload(2)),
            (b"a", payload(0)),  # a duplicate, not a violation
            (b"b", payload(4)),  # another key's order is its own
            (b"a", payload(1)),  # first seen after 2 of its key: a violation
            (b"a", payload(3)),
        ]
    )
    assert tally.records == 6
    assert tally.seen == {0, 1, 2, 3, 4}
    assert tally.violations == 1


def drain(contender: str, rate: float) -> Drain:
    return Drain(
        contender=contender,
        events=1000,
        delivered=1000,
        complete=True,
        startup_s=0.0,
        active_s=1000 / rate,
        counted=1000,
        cpu_s=0.0,
        cpu_total_s=0.0,
        peak_rss_bytes=0,
    )


def test_each_relay_is_held_against_the_pipeline_ceiling_of_its_retention_mode() -> None:
    med = {
        "ceiling": drain("ceiling", 60_000),
        "ceiling-keep": drain("ceiling-keep", 20_000),
        "kafka": drain("kafka", 60_000),
        "ours": drain("ours", 7_500),
        "ours-delete": drain("ours-delete", 24_000),
    }
    ceilings = pipeline_ceilings(med)
    assert ceilings["delete"] == pytest.approx(30_000)
    assert ceilings["keep"] == pytest.approx(15_000)
    ratios = vs_pipeline(med)
    assert ratios["ours"] == pytest.approx(0.5)
    assert ratios["ours-delete"] == pytest.approx(0.8)


def test_no_pipeline_ceiling_without_the_kafka_ceiling() -> None:
    assert pipeline_ceilings({"ceiling": drain("ceiling", 60_000)}) == {}


def test_a_record_without_a_seq_is_counted_as_unreadable_not_fatal() -> None:
    tally = Tally()
    tally.add([(b"a", b"not json"), (b"a", None), (b"a", payload(5))])
    assert (tally.records, tally.unreadable, tally.seen) == (3, 2, {5})
