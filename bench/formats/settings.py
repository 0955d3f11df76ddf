"""The record formats and the relay settings each runs with (OUTBOX_RECORD_FORMAT and the
settings that format needs; docs/record-formats.md)."""

from __future__ import annotations

FORMATS = ("native", "cloudevents-binary", "cloudevents-structured", "debezium")
BASELINE = "native"
BAR = 0.9  # each format's drain against native's, in the same run
# Debezium's table.fields.additional.placement, the one both Debezium and the relay get;
# the header event_type goes in is what most EventRouter users read (eventType).
PLACEMENTS = "event_type:header:eventType"
# The CloudEvents source attribute the relay stamps on every record (a URI-reference).
CLOUDEVENTS_SOURCE = "/bench/record-formats"


def relay_settings(record_format: str) -> dict[str, str]:
    """The relay's environment beyond its defaults for one format."""
    env = {"OUTBOX_RECORD_FORMAT": record_format}
    if record_format.startswith("cloudevents"):
        env["OUTBOX_CLOUDEVENTS_SOURCE"] = CLOUDEVENTS_SOURCE
    if record_format == "debezium":
        env["OUTBOX_DEBEZIUM_PLACEMENTS"] = PLACEMENTS
    return env
