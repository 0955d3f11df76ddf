"""docs/consumer.md ends on the table of every outbox-consumer setting."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "consumer.md"


def test_the_consumer_settings_table_is_current() -> None:
    """Regenerate with: .venv/bin/python scripts/settings_table.py consumer (paste at the end)."""
    from scripts.settings_table import consumer_table

    assert DOC.read_text().endswith(consumer_table())
