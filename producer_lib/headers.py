"""Event headers: user headers validated, content type and trace context added."""

from __future__ import annotations

import re
from collections.abc import Mapping

from outbox_core.cloudevents import HEADER_PREFIX
from producer_lib.errors import InvalidHeader, ReservedHeader

# event_id and event_type travel as columns; the relay adds them to the Kafka headers.
RESERVED = frozenset({"event_id", "event_type", "content-type", "traceparent", "tracestate"})
RESERVED_PREFIXES = ("outbox-", HEADER_PREFIX)  # HEADER_PREFIX: CloudEvents attributes
_NAME = re.compile(r"^[!-~]{1,128}$")
MAX_VALUE_CHARS = 8192


def validate_user_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidHeader(
            f"headers must be a mapping of str to str, not {type(headers).__name__}",
            field="headers",
        )
    clean: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidHeader(
                f"header name {name!r} must be 1-128 printable ASCII characters without spaces",
                field="headers",
            )
        lowered = name.lower()
        if lowered in RESERVED or lowered.startswith(RESERVED_PREFIXES):
            raise ReservedHeader(
                f"header name {name!r} is reserved: the outbox sets "
                f"{', '.join(sorted(RESERVED))} itself, and every name starting with "
                f"{' or '.join(RESERVED_PREFIXES)} (ce_ names hold the CloudEvents "
                "attributes: Event's subject, dataschema and extensions)",
                name=name,
            )
        if not isinstance(value, str):
            raise InvalidHeader(
                f"header {name!r} must be a str, not {type(value).__name__}", field="headers"
            )
        if len(value) > MAX_VALUE_CHARS:
            raise InvalidHeader(
                f"header {name!r} is longer than {MAX_VALUE_CHARS} characters", field="headers"
            )
        if "\x00" in value:
            # Postgres jsonb cannot hold NUL: refused here, alike on every database.
            raise InvalidHeader(
                f"header {name!r} must not contain a NUL character", field="headers"
            )
        clean[name] = value
    return clean


try:
    from opentelemetry import propagate as _propagate
except ImportError:  # the otel extra is optional
    _propagate = None  # type: ignore[assignment]


def trace_context() -> dict[str, str]:
    """The current W3C trace context (traceparent, tracestate), when OpenTelemetry is installed."""
    if _propagate is None:
        return {}
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}


def build_headers(user: dict[str, str], content_type: str) -> dict[str, str]:
    return {"content-type": content_type, **trace_context(), **user}
