"""Which shape a row's record takes on Kafka (OUTBOX_RECORD_FORMAT, per topic
OUTBOX_RECORD_FORMATS), and what the CloudEvents and Debezium shapes need to be built.
The shapes themselves: formats.py."""

from __future__ import annotations

import enum
from typing import ClassVar, NamedTuple

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from outbox_core.cloudevents import URI_REFERENCE
from outbox_core.settings import SettingsGroup


class RecordFormat(enum.StrEnum):
    NATIVE = "native"  # the relay's own: event_id and event_type headers
    CLOUDEVENTS_BINARY = "cloudevents-binary"
    CLOUDEVENTS_STRUCTURED = "cloudevents-structured"
    DEBEZIUM = "debezium"  # as Debezium's outbox EventRouter writes them

    @property
    def cloudevents(self) -> bool:
        return self in (RecordFormat.CLOUDEVENTS_BINARY, RecordFormat.CLOUDEVENTS_STRUCTURED)


# The outbox_events columns a Debezium placement may name (EventRouter's
# table.fields.additional.placement), each as the text the header carries.
PLACEABLE_COLUMNS = ("event_type", "topic", "tenant", "event_id", "created_at")


class Placement(NamedTuple):
    """A column written to a header of the given name (Debezium's `column:header:alias`)."""

    column: str
    header: str


def _header_name(name: str, setting: str) -> str:
    if not name or "\x00" in name or name != name.strip():
        raise ValueError(f"{setting}: a header name must be non-empty, without NUL or blanks")
    return name


def parse_placements(text: str) -> tuple[Placement, ...]:
    """Debezium's placement syntax, `column:header:alias` comma-separated (the alias
    optional: the column's name); only header placements are supported."""
    placements: list[Placement] = []
    for part in text.split(","):
        if not part.strip():
            continue
        column, _, rest = part.strip().partition(":")
        where, _, alias = rest.partition(":")
        if column not in PLACEABLE_COLUMNS:
            raise ValueError(
                f"placement {part.strip()[:64]!r}: the column must be one of "
                f"{', '.join(PLACEABLE_COLUMNS)}"
            )
        if where in ("envelope", "partition"):
            raise ValueError(
                f"placement {part.strip()[:64]!r}: only header placements are supported "
                f"(the relay writes no {where} placement)"
            )
        if where != "header":
            raise ValueError(f"placement {part.strip()[:64]!r}: the form is column:header:alias")
        placements.append(Placement(column, _header_name(alias or column, "placement")))
    return tuple(placements)


class FormatSettings(SettingsGroup):
    """The shape of the records: the relay's own, CloudEvents or Debezium's
    (docs/record-formats.md)."""

    env_infix: ClassVar[str] = ""

    record_format: RecordFormat = Field(
        default=RecordFormat.NATIVE,
        description="Shape of every record: native (event_id and event_type headers), "
        "cloudevents-binary, cloudevents-structured or debezium (Debezium's outbox "
        "EventRouter). Kafka only.",
    )
    record_formats: dict[str, RecordFormat] = Field(
        default_factory=dict,
        description="JSON object mapping a row topic (as in topic_map) to its record "
        'format, overriding record_format, e.g. {"orders":"cloudevents-binary"}.',
    )
    cloudevents_source: str | None = Field(
        default=None,
        validate_default=True,
        description="The CloudEvents source of every event (a URI-reference, e.g. "
        "/orders-service or https://example.com/orders); required with a CloudEvents "
        "record format.",
    )
    debezium_id_header: str = Field(
        default="id",
        description="With the debezium format: the header holding the event_id "
        "(EventRouter's default, id).",
    )
    debezium_placements: str = Field(
        default="event_type:header:eventType",
        description="With the debezium format: columns written to headers, in "
        "EventRouter's table.fields.additional.placement syntax (column:header:alias, "
        "comma-separated; columns event_type, topic, tenant, event_id, created_at; "
        "header placements only).",
    )

    @field_validator("cloudevents_source")
    @classmethod
    def _source(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            formats = {
                info.data.get("record_format"),
                *info.data.get("record_formats", {}).values(),
            }
            if any(isinstance(f, RecordFormat) and f.cloudevents for f in formats):
                raise PydanticCustomError(
                    "missing",
                    "OUTBOX_CLOUDEVENTS_SOURCE (--cloudevents-source) is required with a "
                    "CloudEvents record format",
                )
            return None
        if not URI_REFERENCE.fullmatch(value):
            raise ValueError(
                "must be a non-empty URI-reference (RFC 3986) without whitespace or "
                "control characters"
            )
        return value

    @field_validator("debezium_id_header")
    @classmethod
    def _id_header(cls, value: str) -> str:
        return _header_name(value, "debezium_id_header")

    @field_validator("debezium_placements")
    @classmethod
    def _placements(cls, value: str, info: ValidationInfo) -> str:
        headers = [p.header for p in parse_placements(value)]
        id_header = info.data.get("debezium_id_header")
        taken = [*headers, *([id_header] if id_header else [])]
        if len({h.lower() for h in taken}) != len(taken):
            raise ValueError("two headers of the debezium format would have the same name")
        return value

    def format_of(self, row_topic: str) -> RecordFormat:
        return self.record_formats.get(row_topic, self.record_format)

    def in_use(self) -> set[RecordFormat]:
        return {self.record_format, *self.record_formats.values()}

    def placements(self) -> tuple[Placement, ...]:
        return parse_placements(self.debezium_placements)
