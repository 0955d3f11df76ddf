"""Nested settings with flat names: OUTBOX_KAFKA_SECURITY_PROTOCOL, --kafka-security-protocol.

A daemon's settings are a BaseSettings whose fields are SettingsGroups (kafka, leases,
purge, ...) or plain values. Each group names the infix its fields carry in the flat
namespace (the kafka group: "kafka_", so its `client_id` is `kafka_client_id`), so users
keep one flat list of environment variables and flags while each component receives only
its group. Flat keyword arguments are accepted too (`load_settings(kafka_client_id=...)`).
"""

from __future__ import annotations

import argparse
import enum
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource


class SettingsGroup(BaseModel):
    """A group of settings; `env_infix` + field name is the field's flat name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env_infix: ClassVar[str] = ""


@dataclass(frozen=True)
class FlatField:
    name: str  # the flat name: kafka_client_id
    path: tuple[str, ...]  # where it lives: ("kafka", "client_id")
    info: FieldInfo

    def env(self, prefix: str) -> str:
        return f"{prefix}{self.name}".upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_bool(self) -> bool:
        return self.info.annotation is bool

    @property
    def default_text(self) -> str:
        """The default as --help and the docs show it ("(required)" when there is none)."""
        info = self.info
        if info.is_required():
            return "(required)"
        value = info.get_default(call_default_factory=True)
        if isinstance(value, dict | list):
            return json.dumps(value)
        # A factory's other values differ per process (a replica id).
        return "(generated)" if info.default_factory is not None else str(value)

    def help(self, prefix: str) -> str:
        return (
            f"{self.info.description or ''} [env {self.env(prefix)}; default {self.default_text}]"
        )

    @property
    def is_json(self) -> bool:
        kind = get_origin(self.info.annotation) or self.info.annotation
        return kind in (dict, list) or any(
            (get_origin(a) or a) in (dict, list) for a in get_args(self.info.annotation)
        )


def add_flags(parser: argparse.ArgumentParser, fields: Iterable[FlatField], prefix: str) -> None:
    """A flag per setting, mirroring its environment variable (a flag given wins); unset
    flags are None, so they never override the environment."""
    for field in fields:
        if field.is_bool:
            parser.add_argument(
                field.flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=field.help(prefix),
            )
        else:
            parser.add_argument(
                field.flag, dest=field.name, default=None, metavar="VALUE", help=field.help(prefix)
            )


def _group_of(info: FieldInfo) -> type[SettingsGroup] | None:
    kind = info.annotation
    return kind if isinstance(kind, type) and issubclass(kind, SettingsGroup) else None


def flat_fields(model: type[BaseModel]) -> Iterator[FlatField]:
    for name, info in model.model_fields.items():
        group = _group_of(info)
        if group is None:
            yield FlatField(name, (name,), info)
            continue
        for sub, sub_info in group.model_fields.items():
            key = sub_info.alias or sub  # what the group is built from (alias: "json")
            yield FlatField(group.env_infix + key, (name, key), sub_info)


def nest(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """Flat keys moved into their groups; group and unknown keys are left as they are.
    Every group is present (empty when nothing was given), so its own checks run."""
    by_name = {f.name: f for f in flat_fields(model) if len(f.path) > 1}
    out: dict[str, Any] = {
        name: {} for name, info in model.model_fields.items() if _group_of(info) is not None
    }
    for key, value in values.items():
        field = by_name.get(key)
        if field is None:
            out[key] = value
            continue
        group, sub = field.path
        existing = out.setdefault(group, {})
        if isinstance(existing, dict):
            existing[sub] = value
    return out


def flat_name(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The flat name of a validation error's location; None for a whole group or model
    (a check across fields, whose message names them)."""
    if not loc:
        return None
    head = str(loc[0])
    info = model.model_fields.get(head)
    group = _group_of(info) if info is not None else None
    if group is None:
        return head
    return group.env_infix + str(loc[1]) if len(loc) > 1 else None


class FlatEnvSource(PydanticBaseSettingsSource):
    """Reads PREFIX + flat name (any case) for every field, into the nested shape."""

    def __init__(self, settings_cls: type[BaseSettings], prefix: str) -> None:
        super().__init__(settings_cls)
        self._prefix = prefix

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ does the work for all fields at once

    def __call__(self) -> dict[str, Any]:
        return nest(self.settings_cls, self.flat())

    def flat(self) -> dict[str, Any]:
        """The values set in the environment, by flat name."""
        environ = {k.upper(): v for k, v in os.environ.items()}
        found: dict[str, Any] = {}
        for field in flat_fields(self.settings_cls):
            raw = environ.get(field.env(self._prefix))
            if raw is None:
                continue
            value: Any = raw
            if field.is_json:
                try:
                    value = json.loads(raw)
                except json.JSONDecodeError:
                    value = raw  # validation reports it as the wrong type
            found[field.name] = value
        return found


class FlatSettings(BaseSettings):
    """A daemon's settings: flat keyword arguments (kafka_client_id=...) as users and the
    CLI give them, and the environment read as PREFIX + flat name, nothing else (no
    .env file, no secrets directory: those come in through *_FILE settings).
    A model with `reads_environment = False` takes its keyword arguments alone."""

    reads_environment: ClassVar[bool] = True

    def __init__(self, **values: Any) -> None:
        super().__init__(**nest(type(self), values))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if not cls.reads_environment:
            return (init_settings,)
        prefix = str(settings_cls.model_config.get("env_prefix", ""))
        return (init_settings, FlatEnvSource(settings_cls, prefix))


class SettingFault(enum.Enum):
    """What is wrong with a setting, whichever way it was given (code, environment, flag)."""

    MISSING = "missing"  # a required setting was not given
    UNKNOWN = "unknown"  # no setting has this name
    WRONG_TYPE = "wrong_type"  # not a number, a boolean, a text... as the setting is
    OUT_OF_RANGE = "out_of_range"  # a number or a length past the setting's bounds
    NOT_FINITE = "not_finite"  # NaN or an infinity
    NOT_A_CHOICE = "not_a_choice"  # none of the values the setting allows
    INVALID = "invalid"  # the setting's own rule refuses it (a topic name, a blank text)


_FAULTS = {
    "missing": SettingFault.MISSING,
    "extra_forbidden": SettingFault.UNKNOWN,
    "greater_than": SettingFault.OUT_OF_RANGE,
    "greater_than_equal": SettingFault.OUT_OF_RANGE,
    "less_than": SettingFault.OUT_OF_RANGE,
    "less_than_equal": SettingFault.OUT_OF_RANGE,
    "string_too_short": SettingFault.OUT_OF_RANGE,
    "string_too_long": SettingFault.OUT_OF_RANGE,
    "too_short": SettingFault.OUT_OF_RANGE,
    "too_long": SettingFault.OUT_OF_RANGE,
    "finite_number": SettingFault.NOT_FINITE,
    "literal_error": SettingFault.NOT_A_CHOICE,
    "enum": SettingFault.NOT_A_CHOICE,
}


def _fault(error_type: str) -> SettingFault:
    found = _FAULTS.get(error_type)
    if found is not None:
        return found
    # pydantic's int_parsing, float_type, bool_parsing, int_from_float, string_type ...
    if error_type.endswith(("_type", "_parsing", "_from_float")):
        return SettingFault.WRONG_TYPE
    return SettingFault.INVALID


@dataclass(frozen=True)
class SettingProblem:
    """One refused setting: its flat name (None for a check across settings, whose
    message names them), what is wrong, and pydantic's message (never the value)."""

    name: str | None
    fault: SettingFault
    message: str
    where: str = ""  # the first element of the error's location when it names no setting

    def line(self, prefix: str) -> str:
        where = f"{self.name} ({prefix}{self.name.upper()})" if self.name else self.where
        return f"  {where}: {self.message}"


def setting_problems(model: type[BaseModel], exc: ValidationError) -> list[SettingProblem]:
    """The errors of a validation, one per refused setting, by flat name."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = tuple(err["loc"])
        problems.append(
            SettingProblem(
                flat_name(model, loc),
                _fault(err["type"]),
                err["msg"],
                str(loc[0]) if loc else "settings",
            )
        )
    return problems
