"""docs/relay.md lists every relay setting (it is the operator's reference)."""

from __future__ import annotations

from pathlib import Path

from relay.config import field_help

DOC = Path(__file__).resolve().parents[2] / "docs" / "relay.md"


def test_every_setting_is_documented() -> None:
    text = DOC.read_text()
    missing = [env for _flag, env, _text, _default in field_help() if f"`{env}`" not in text]
    assert missing == []


def test_the_settings_table_is_current() -> None:
    """Regenerate with: .venv/bin/python scripts/settings_table.py (paste at the end of the doc)."""
    from scripts.settings_table import table

    assert DOC.read_text().endswith(table())
