"""An event's optional CloudEvents attributes (subject, dataschema, extensions): checked
when the Event is built, stored in the row's headers as `ce_<attribute>`. The relay
publishes them in a CloudEvents record format and leaves them as headers otherwise."""

from __future__ import annotations

from collections.abc import Mapping

from outbox_core.cloudevents import (
    ABSOLUTE_URI,
    DATASCHEMA,
    EXTENSION_NAME,
    HEADER_PREFIX,
    RESERVED_ATTRIBUTES,
    SUBJECT,
)
from producer_lib.errors import InvalidEvent

MAX_ATTRIBUTE_CHARS = 8192  # as a user header's value: each is one header


def _text(value: object, name: str, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(f"{name} must be a str, not {type(value).__name__}", field=field)
    if len(value) > MAX_ATTRIBUTE_CHARS:
        raise InvalidEvent(f"{name} is longer than {MAX_ATTRIBUTE_CHARS} characters", field=field)
    if "\x00" in value:
        # Postgres jsonb cannot hold NUL: refused here, alike on every database.
        raise InvalidEvent(f"{name} must not contain a NUL character", field=field)
    return value


def check_subject(subject: object) -> None:
    if subject is not None and _text(subject, "subject", "subject") == "":
        raise InvalidEvent("subject must not be empty", field="subject")


def check_dataschema(dataschema: object) -> None:
    if dataschema is not None and not ABSOLUTE_URI.fullmatch(
        _text(dataschema, "dataschema", "dataschema")
    ):
        raise InvalidEvent(
            "dataschema must be an absolute URI (RFC 3986: a scheme such as https: and "
            "the rest, without whitespace)",
            field="dataschema",
        )


def check_extensions(extensions: object) -> None:
    if extensions is None:
        return
    if not isinstance(extensions, Mapping):
        raise InvalidEvent(
            f"extensions must be a mapping of str to str, not {type(extensions).__name__}",
            field="extensions",
        )
    for name, value in extensions.items():
        if not isinstance(name, str) or not EXTENSION_NAME.fullmatch(name):
            raise InvalidEvent(
                f"extension name {name!r} must be 1-20 lower-case letters and digits "
                "(the CloudEvents naming rule)",
                field="extensions",
            )
        if name in RESERVED_ATTRIBUTES:
            raise InvalidEvent(
                f"extension name {name!r} is an attribute CloudEvents or the relay sets: "
                f"{', '.join(sorted(RESERVED_ATTRIBUTES))}",
                field="extensions",
            )
        _text(value, f"extension {name!r}", "extensions")


def attribute_headers(
    subject: str | None, dataschema: str | None, extensions: Mapping[str, str] | None
) -> dict[str, str]:
    """The checked attributes as the headers they are stored in."""
    headers = {HEADER_PREFIX + name: value for name, value in (extensions or {}).items()}
    if subject is not None:
        headers[SUBJECT] = subject
    if dataschema is not None:
        headers[DATASCHEMA] = dataschema
    return headers
