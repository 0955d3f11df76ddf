"""Structured logs: `message key=value ...` for people, one JSON object per line with log_json.

Every line passes through redact(): passwords in URLs and `password=` pairs, and the
known secret values the process was configured with, never reach the output, whether
they sit in the message, an extra field or an exception's text.

A JSON line carries `ts`, an ISO-8601 UTC time with milliseconds, and, where one is known,
the W3C trace it belongs to as `trace_id` and `span_id`: from a `traceparent` field of the
log call (an event's header), else the current OpenTelemetry span, else the traceparent of
the event being applied (trace_scope). A malformed traceparent is dropped, never printed.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is optional
    _trace = None  # type: ignore[assignment]

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# The secret runs to the last "@" of the authority: a password with a raw "@" in it
# ("p@ss") is parsed that way by libpq and PyMySQL, and must be hidden whole.
_URL_PASSWORD = re.compile(
    r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^\s]*?)(?P<tail>@)"
    r"(?=[^@\s/?#]*(?:[/?#\s]|$))"
)
_PAIR_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|sasl_password|sasl\.password)\s*[=:]\s*['\"]?)(?P<secret>[^'\"\s&;,]+)",
    re.IGNORECASE,
)
_secrets: set[str] = set()
_ordered: list[str] = []
# version-traceid-spanid-flags; version ff is invalid, and so are all-zero ids (W3C).
_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})([0-9a-f]{32})-(?!0{16})([0-9a-f]{16})-[0-9a-f]{2}"
)
_traceparent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "outbox_traceparent", default=None
)


def _spellings(value: str) -> set[str]:
    """A secret as it may be printed: raw, URL-decoded or -encoded, escaped by json.dumps
    (JSON logs) or by repr() (a list or dict in a log field, a traceback)."""
    forms = {value, unquote(value), quote(value, safe="")}
    for form in list(forms):
        forms.add(json.dumps(form)[1:-1])
        forms.add(repr(form)[1:-1])
    return forms


def add_secrets(values: Iterable[str | None]) -> None:
    """Values that must never be printed (passwords, tokens), whatever surrounds them."""
    global _ordered
    for v in values:
        if v and len(v) >= 3:
            _secrets.update(f for f in _spellings(v) if len(f) >= 3)
    # Longest first, so a secret that contains another is replaced whole.
    _ordered = sorted(_secrets, key=len, reverse=True)


def url_secrets(url: str | None) -> list[str]:
    """The secret parts of a database URL: the URL itself and its password."""
    if not url:
        return []
    found = [url]
    with contextlib.suppress(ValueError):
        found.append(urlsplit(url).password or "")
    match = _URL_PASSWORD.search(url)  # also when urlsplit cannot parse the rest
    if match:
        found.append(match.group("secret"))
    for pair in _PAIR_PASSWORD.finditer(url):  # ?password=... in the query string
        found.append(pair.group("secret"))
    return [s for s in found if s]


def redact(text: str) -> str:
    text = _URL_PASSWORD.sub(r"\g<head>***\g<tail>", text)
    text = _PAIR_PASSWORD.sub(r"\g<head>***", text)
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


@contextlib.contextmanager
def trace_scope(traceparent: str | None) -> Iterator[None]:
    """Log lines inside the block belong to this W3C traceparent (an event's header), when
    no OpenTelemetry span is current."""
    token = _traceparent.set(traceparent)
    try:
        yield
    finally:
        _traceparent.reset(token)


def parse_traceparent(value: object) -> tuple[str, str] | None:
    """(trace_id, span_id) of a W3C traceparent header; None for anything malformed."""
    if not isinstance(value, str) or len(value) > 128:
        return None
    # Later versions may append fields after the flags ("-..."); version 00 may not.
    head = value[:55]
    match = _TRACEPARENT.fullmatch(head)
    if match is None or (len(value) > 55 and (value.startswith("00") or value[55] != "-")):
        return None
    return match.group(1), match.group(2)


def _current_span_ids() -> tuple[str, str] | None:
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def trace_ids(record: logging.LogRecord) -> tuple[str, str] | None:
    """The (trace_id, span_id) a log record belongs to, if any (see the module's doc)."""
    if "traceparent" in record.__dict__:
        return parse_traceparent(record.__dict__["traceparent"])
    return _current_span_ids() or parse_traceparent(_traceparent.get())


def iso_utc(created: float) -> str:
    """An epoch time as ISO-8601 UTC with milliseconds: 2026-12-01T20:24:16.123Z."""
    seconds = int(created)
    millis = min(int((created - seconds) * 1000), 999)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = (
            f"{iso_utc(record.created)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        )
        if fields:
            line += f" {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": iso_utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ids = trace_ids(record)
        if ids is not None:
            doc["trace_id"], doc["span_id"] = ids
        extras = _extras(record)
        extras.pop("traceparent", None)  # printed as its ids, or not at all when malformed
        doc.update(extras)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(doc, default=str))


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))


def install_excepthook() -> None:
    """Uncaught exceptions go through the same redaction as log lines."""
    sys.excepthook = _excepthook


def configure(
    level: str = "INFO", as_json: bool = False, secrets: Iterable[str | None] = ()
) -> None:
    add_secrets(secrets)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if as_json else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    install_excepthook()
    # aiokafka logs every failed connection attempt at ERROR; the relay reports outages itself.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL if level != "DEBUG" else logging.DEBUG)
