"""The base install is enough for producer_lib: its import path needs none of the relay's
and consumer's packages; relay and consumer_lib name their extra when it is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from outbox_core.distribution import EXTRAS, MissingExtra, require, version

ROOT = Path(__file__).resolve().parents[2]
EXTRA_ONLY = sorted(set(EXTRAS["relay"]) | set(EXTRAS["consumer"]))

# A finder first on sys.meta_path that refuses the extras' packages, as if not installed.
BLOCK = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""

EMIT = """
import sqlite3
from producer_lib import Outbox, RecordingOutbox, migrate
migrate("sqlite:///" + sys.argv[2])
conn = sqlite3.connect(sys.argv[2])
Outbox().emit(conn, topic="t", key="k", event_type="E", payload={"a": 1})
conn.commit()
RecordingOutbox().emit(None, topic="t", key="k", event_type="E", payload={})
loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
assert not loaded, loaded
print("ok")
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_producer_lib_imports_and_emits_without_the_extras(tmp_path: Path) -> None:
    result = _python(BLOCK + EMIT, ",".join(EXTRA_ONLY), str(tmp_path / "o.db"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_block_is_real() -> None:
    # Without this the test above could pass with nothing blocked.
    result = _python(BLOCK + "import aiokafka", "aiokafka")
    assert "No module named 'aiokafka'" in result.stderr


@pytest.mark.parametrize(("package", "extra"), [("relay", "relay"), ("consumer_lib", "consumer")])
def test_a_missing_extra_is_named(package: str, extra: str) -> None:
    result = _python(BLOCK + f"import {package}", "aiokafka")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"outbox_core.distribution.MissingExtra: outbox-relay: the {extra} needs the "
        f"'{extra}' extra: pip install 'outbox-relay[{extra}]' (missing: aiokafka)"
    )


def test_missing_extra_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "relay", ("surely_not_installed_module",))
    with pytest.raises(ImportError, match=r"pip install 'outbox-relay\[relay\]'") as err:
        require("relay", "relay")
    assert isinstance(err.value, MissingExtra)
    assert err.value.missing == ["surely_not_installed_module"]


def test_the_version_is_the_distribution_metadata() -> None:
    from importlib import metadata

    assert version() == metadata.version("outbox-relay")
    for command in ("relay.cli", "consumer_lib.cli"):
        result = _python(f"import sys; from {command} import main; sys.exit(main(['--version']))")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [
            "outbox-relay" if command == "relay.cli" else "outbox-consumer",
            version(),
        ]
