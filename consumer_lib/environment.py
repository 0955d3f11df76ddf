"""Where ConsumerSettings.from_env finds its values: `outbox-consumer run` flags, the
environment (OUTBOX_CONSUMER_<NAME>), then the values given in code.

    app = ConsumerApp(ConsumerSettings.from_env(group_id="billing"), SqlAlchemyAsync(engine))

What wins, highest first: the command line's flags, the environment, the values given to
from_env in code, the defaults. Every value is checked by ConsumerSettings itself, as in
code. Secrets (the SASL and key passwords) are best read from files
(OUTBOX_CONSUMER_KAFKA_SASL_PASSWORD_FILE); no input value is ever echoed in an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from consumer_lib.settings import ENV_PREFIX, ConsumerSettings
from outbox_core import logs
from outbox_core.settings import FlatEnvSource, FlatField, flat_fields

__all__ = [
    "COMMAND_ONLY",
    "ENV_PREFIX",
    "env_names_set",
    "flags_given",
    "flags_used",
    "set_flags",
    "settings_fields",
    "settings_from_env",
    "unknown_env_names",
]

# Read by `outbox-consumer run` itself, before any app is imported.
COMMAND_ONLY = ("LOG_LEVEL", "LOG_JSON")


class _Flags:
    """Values of `outbox-consumer run` flags, handed to the from_env call that builds the
    app's settings; `used` tells the command whether one did."""

    values: ClassVar[dict[str, Any]] = {}
    used: ClassVar[bool] = False


def set_flags(values: Mapping[str, Any]) -> None:
    _Flags.values = dict(values)
    _Flags.used = False


def flags_used() -> bool:
    return _Flags.used


def flags_given() -> list[str]:
    return sorted("--" + name.replace("_", "-") for name in _Flags.values)


def settings_from_env(**defaults: Any) -> ConsumerSettings:
    """ConsumerSettings from flags, then OUTBOX_CONSUMER_* variables, then `defaults`.

    `defaults` take the flat names (group_id=..., kafka_security_protocol=...). Raises
    ConsumerSettingsError with one line per bad setting, naming its variable.
    """
    environ = FlatEnvSource(ConsumerSettings, ENV_PREFIX).flat()
    _Flags.used = True
    settings = ConsumerSettings(**{**defaults, **environ, **_Flags.values})
    security = settings.security
    logs.add_secrets([s for s in (security.sasl_password, security.ssl_key_password) if s])
    return settings


def settings_fields() -> list[FlatField]:
    return list(flat_fields(ConsumerSettings))


def unknown_env_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """OUTBOX_CONSUMER_* variables that name no setting (a typo): they are ignored."""
    known = {field.env(ENV_PREFIX) for field in settings_fields()}
    known |= {f"{ENV_PREFIX}{name}" for name in COMMAND_ONLY}
    names = os.environ if environ is None else environ
    return sorted(n for n in names if n.upper().startswith(ENV_PREFIX) and n.upper() not in known)


def env_names_set(environ: Mapping[str, str] | None = None) -> list[str]:
    names = os.environ if environ is None else environ
    return sorted(n for n in names if n.upper().startswith(ENV_PREFIX))
