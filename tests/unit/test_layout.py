"""The libraries are siblings on one shared core: producer_lib, relay and consumer_lib import
only outbox_core (and themselves), and the core imports none of them."""

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
