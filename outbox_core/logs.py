"""Structured logs: `message key=value ...` for people, one JSON object per line with log_json.

Every line passes through redact(): passwords in URLs and `password=` pairs, and the
known secret values the process was configured with, never reach the output, whether
they sit in the message, an extra field or an exception's text.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import time
import traceback
from collections.abc import Iterable
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_URL_PASSWORD = re.compile(
    r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^@\s]*)(?P<tail>@)"
)
_PAIR_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|sasl_password|sasl\.password)\s*[=:]\s*['\"]?)(?P<secret>[^'\"\s&;,]+)",
    re.IGNORECASE,
)
_secrets: set[str] = set()
_ordered: list[str] = []


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


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{stamp}.{int(record.msecs):03d}Z {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line += f" {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
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
