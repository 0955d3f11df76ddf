"""The libraries are siblings on one shared core: producer_lib, relay and consumer_lib import
only outbox_core (and themselves), and the core imports none of them. Inside the relay,
modules sit in the package of their concern, and each concern imports only what it may
(what bench/ may import: tests/unit/test_bench_registry.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("producer_lib", "relay", "consumer_lib")
CORE = "outbox_core"


def imported_packages(source: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    found = []
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def crossings(package: str, forbidden: set[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, name in imported_packages(path)
        if name in forbidden
    ]


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_library_imports_no_other_library(library: str) -> None:
    assert crossings(library, set(LIBRARIES) - {library}) == []


def test_the_core_imports_no_library() -> None:
    assert crossings(CORE, set(LIBRARIES)) == []


def test_the_check_sees_an_import_across(tmp_path: Path) -> None:
    # The walk must notice both import forms, or the tests above could never fail.
    source = tmp_path / "m.py"
    source.write_text("import relay.config\nfrom producer_lib.outbox import Outbox\n")
    assert [name for _, name in imported_packages(source)] == ["relay", "producer_lib"]


# ---------------------------------------------------------------------------- the relay


def relay_imports(source: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import of a relay module in a file."""
    found = []
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "relay"]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, node.module)] if node.module.split(".")[0] == "relay" else []
    return found


def under(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


# The relay's top level is its composition root; every other module sits in the package
# of the concern it serves.
RELAY_TOP = {"__init__", "cli", "config", "database", "errors", "service"}
RELAY_CONCERNS = {"control", "ops", "pipeline", "store", "transport"}
# What each concern may import of the relay (besides itself): the store and the
# transport know nothing of the loops, and the pipeline knows no transport by name.
MAY_IMPORT = {
    "store": {"relay.errors"},
    "transport": {"relay.errors", "relay.store"},
    "pipeline": {
        "relay.errors",
        "relay.store",
        "relay.ops.observer",
        "relay.transport.errors",
        "relay.transport.protocol",
        "relay.transport.records",
    },
    "control": {"relay.errors", "relay.store", "relay.ops.observer", "relay.pipeline.loop"},
}
# aiokafka internals the publisher needs, allowed in one adapter only.
AIOKAFKA_INTERNALS = (
    "aiokafka.producer",
    "_message_accumulator",
    "_wait_on_metadata",
    "client._topics",
    "unauthorized_topics",
    "force_metadata_update",
    "_txn_manager",
    "BACKOFF_OVERRIDE",
)
AIOKAFKA_ADAPTER = "relay/transport/aiokafka_adapter.py"


def test_the_relay_is_laid_out_by_concern() -> None:
    relay = ROOT / "relay"
    top = {p.stem for p in relay.glob("*.py")}
    packages = {p.parent.name for p in relay.glob("*/__init__.py")}
    assert (top, packages) == (RELAY_TOP, RELAY_CONCERNS)
    assert not list(relay.glob("*/*/*.py"))  # one level of concerns


@pytest.mark.parametrize("concern", sorted(MAY_IMPORT))
def test_a_relay_concern_imports_only_what_it_may(concern: str) -> None:
    allowed = MAY_IMPORT[concern] | {f"relay.{concern}"}
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "relay" / concern).rglob("*.py"))
        for line, module in relay_imports(path)
        if not under(module, allowed)
    ]
    assert wrong == []


def test_the_pipeline_imports_no_broker_client() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / "relay" / "pipeline").rglob("*.py"))
        for line, name in imported_packages(path)
        if name in {"aiokafka", "redis"}
    ]
    assert wrong == []


def test_aiokafka_internals_are_used_in_one_adapter_only() -> None:
    wrong = [
        f"{path.relative_to(ROOT)} uses {internal}"
        for path in sorted((ROOT / "relay").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != AIOKAFKA_ADAPTER
        for internal in AIOKAFKA_INTERNALS
        if internal in path.read_text()
    ]
    assert wrong == []


def test_the_relay_checks_see_a_wrong_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from relay.transport.kafka import KafkaPublisher\nimport relay.cli\n")
    assert relay_imports(source) == [(1, "relay.transport.kafka"), (2, "relay.cli")]
    assert not under("relay.transport.kafka", MAY_IMPORT["pipeline"])
    assert under("relay.transport.errors", MAY_IMPORT["pipeline"])
