"""CloudEvents names every part agrees on: the producer stores an event's optional
attributes (subject, dataschema, extensions) in the row's headers under the Kafka
binding's binary-mode header names (`ce_<attribute>`), the relay turns them into a
record's attributes, and a consumer reads them back.

CloudEvents 1.0 (https://github.com/cloudevents/spec, spec.md and
bindings/kafka-protocol-binding.md).
"""

from __future__ import annotations

import datetime as dt
import re

SPEC_VERSION = "1.0"
HEADER_PREFIX = "ce_"  # the Kafka binding's binary-mode header of an attribute
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"

SUBJECT = HEADER_PREFIX + "subject"
DATASCHEMA = HEADER_PREFIX + "dataschema"

# Attributes the spec defines, or the relay sets from the row (partitionkey is the
# record's key; traceparent and tracestate come from the trace context): an extension
# may not take one of these names.
RESERVED_ATTRIBUTES = frozenset(
    {
        "id",
        "source",
        "specversion",
        "type",
        "datacontenttype",
        "dataschema",
        "subject",
        "time",
        "data",
        "data_base64",
        "partitionkey",
        "traceparent",
        "tracestate",
    }
)
# Lower-case letters and digits; the spec says a name SHOULD NOT exceed 20 characters,
# which is enforced so that every broker and SDK takes the name.
EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
# RFC 3986 absolute URI: a scheme, a colon, then something; never whitespace.
ABSOLUTE_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s\x00-\x1f\x7f]+")
# RFC 3986 URI-reference (relative ones included): no whitespace or control characters.
URI_REFERENCE = re.compile(r"[^\s\x00-\x1f\x7f]+")


def rfc3339(epoch_s: float) -> str:
    """An instant as RFC 3339 UTC with microseconds: 2026-12-05T09:00:00.123456Z."""
    moment = dt.datetime.fromtimestamp(epoch_s, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
