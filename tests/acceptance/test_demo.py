"""The README's first command keeps working: the demo, small, on both databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_demo_delivers_everything_in_order(
    database: str, kafka_bootstrap: str, postgres_admin: str
) -> None:
    args = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--events", "600", "--keys", "40"]
    if database == "postgres":
        args.append("--postgres")
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "delivered 600/600, missing 0, duplicates 0, order violations 0, parked 0" in result.stdout
    )
    assert "relay throughput:" in result.stdout


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_demo_on_redis_delivers_everything_in_order(
    database: str, redis_url: str, postgres_admin: str
) -> None:
    args = [
        sys.executable,
        str(ROOT / "scripts" / "demo.py"),
        "--transport",
        "redis",
        "--events",
        "600",
        "--keys",
        "40",
    ]
    if database == "postgres":
        args.append("--postgres")
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "delivered 600/600, missing 0, duplicates 0, order violations 0, parked 0" in result.stdout
    )
    assert "stream: demo-orders-" in result.stdout
