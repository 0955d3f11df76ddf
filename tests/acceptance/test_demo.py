"""The README's first command keeps working: the demo, small, on both databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("transport", ["kafka", "redis"])
@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_demo_delivers_everything_in_order(
    database: str, transport: str, request: pytest.FixtureRequest, postgres_admin: str
) -> None:
    request.getfixturevalue("redis_url" if transport == "redis" else "kafka_bootstrap")
    args = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--events", "600", "--keys", "40"]
    args += ["--transport", transport]
    if database == "postgres":
        args.append("--postgres")
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "delivered 600/600, missing 0, duplicates 0, order violations 0, parked 0" in result.stdout
    )
    assert "relay throughput:" in result.stdout
