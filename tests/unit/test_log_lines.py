"""outbox_core.logs' JSON lines: an ISO-8601 UTC timestamp, and the W3C trace a line belongs
to (a traceparent field, the current OpenTelemetry span, or trace_scope), with malformed or
forged traceparents dropped rather than printed."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from outbox_core import logs

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


def _line(
    message: str = "applied", created: float | None = None, **extra: object
) -> dict[str, Any]:
    record = logging.LogRecord("consumer_lib", logging.INFO, __file__, 1, message, None, None)
    if created is not None:
        record.created = created
        record.msecs = (created - int(created)) * 1000
    record.__dict__.update(extra)
    doc: dict[str, Any] = json.loads(logs.JsonFormatter().format(record))
    return doc


def test_the_timestamp_is_iso_8601_utc_with_milliseconds() -> None:
    created = dt.datetime(2026, 12, 1, 20, 24, 16, 123456, tzinfo=dt.UTC).timestamp()
    doc = _line(created=created)
    assert doc["ts"] == "2026-12-01T20:24:16.123Z"
    parsed = dt.datetime.fromisoformat(doc["ts"])
    assert parsed.utcoffset() == dt.timedelta(0)
    assert abs(parsed.timestamp() - created) < 0.001
    # The last millisecond of a second never rounds up into the next second.
    assert _line(created=int(created) + 0.9999)["ts"] == "2026-12-01T20:24:16.999Z"


def test_text_lines_carry_the_same_timestamp() -> None:
    created = dt.datetime(2026, 12, 1, 20, 24, 16, 5000, tzinfo=dt.UTC).timestamp()
    record = logging.LogRecord("relay", logging.INFO, __file__, 1, "started", None, None)
    record.created = created
    assert logs.TextFormatter().format(record).startswith("2026-12-01T20:24:16.005Z INFO ")


def test_a_traceparent_field_becomes_trace_and_span_ids() -> None:
    doc = _line(traceparent=TRACEPARENT, offset=7)
    assert doc["trace_id"] == TRACE
    assert doc["span_id"] == SPAN
    assert "traceparent" not in doc
    assert doc["offset"] == 7


def test_lines_without_a_trace_have_no_trace_fields() -> None:
    doc = _line()
    assert "trace_id" not in doc
    assert "span_id" not in doc


HOSTILE = {
    "upper case hex": f"00-{TRACE.upper()}-{SPAN}-01",
    "all-zero trace id": f"00-{'0' * 32}-{SPAN}-01",
    "all-zero span id": f"00-{TRACE}-{'0' * 16}-01",
    "version ff": f"ff-{TRACE}-{SPAN}-01",
    "short trace id": f"00-{TRACE[:-1]}-{SPAN}-01",
    "version 00 with more fields": f"{TRACEPARENT}-extra",
    "a later version, no dash after the flags": f"01-{TRACE}-{SPAN}-01x",
    "oversized": f"01-{TRACE}-{SPAN}-01-" + "a" * 10_000,
    "a line break (a forged log line)": f'{TRACEPARENT}\n{{"level": "error"}}',
    "empty": "",
    "not a string": {"trace_id": TRACE},
    "bytes": TRACEPARENT.encode(),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_malformed_traceparent_is_dropped_not_printed(name: str) -> None:
    doc = _line(traceparent=HOSTILE[name])
    assert "trace_id" not in doc
    assert "traceparent" not in doc
    assert doc["msg"] == "applied"


def test_a_later_version_may_carry_more_fields() -> None:
    assert logs.parse_traceparent(f"01-{TRACE}-{SPAN}-01-what-comes-next") == (TRACE, SPAN)


def test_the_current_opentelemetry_span_names_the_trace() -> None:
    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("handler") as span:
        context = span.get_span_context()
        doc = _line()
    assert doc["trace_id"] == f"{context.trace_id:032x}"
    assert doc["span_id"] == f"{context.span_id:016x}"
    # A line about one event names that event's trace, whatever span is current.
    with tracer.start_as_current_span("loop"):
        assert _line(traceparent=TRACEPARENT)["trace_id"] == TRACE


def test_trace_scope_names_the_trace_without_a_span() -> None:
    with logs.trace_scope(TRACEPARENT):
        inside = _line()
        with logs.trace_scope("garbage"):
            nested = _line()
        again = _line()
    after = _line()
    assert inside["trace_id"] == TRACE
    assert "trace_id" not in nested
    assert again["trace_id"] == TRACE
    assert "trace_id" not in after
    # An OpenTelemetry span, when current, is the more precise parent.
    tracer = TracerProvider().get_tracer("tests")
    with logs.trace_scope(TRACEPARENT), tracer.start_as_current_span("handler") as span:
        doc = _line()
    assert doc["trace_id"] == f"{span.get_span_context().trace_id:032x}"
