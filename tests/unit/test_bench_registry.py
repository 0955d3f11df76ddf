"""bench/ is a tool a maintainer keeps: one entry point (`python -m bench NAME`) over one
registry, every bench module in it and every entry linked to a section of
docs/benchmarks.md; and the benches import only the libraries' public entry points, so
that a reshuffle of a library's internals does not break them."""

from __future__ import annotations

import ast
import importlib
import re
import threading
from pathlib import Path

import pytest

from bench.__main__ import listing, main
from bench.registry import BENCHES, DOCS
from tests.unit.test_docs import anchors

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("producer_lib", "relay", "consumer_lib", "outbox_core")
# The relay's entry points (docs/design.md, "Parts"); producer_lib and consumer_lib are
# used through their packages only.
PUBLIC = {
    "producer_lib",
    "consumer_lib",
    "relay.cli",
    "relay.config",
    "relay.database",
    "relay.pipeline",
    "relay.service",
    "relay.store",
    "relay.transport",
}
NOT_BENCHES = {"__init__", "__main__", "registry"}


def core_modules() -> set[str]:
    """outbox_core's modules docs/design.md documents (its table of what the core holds)."""
    design = (ROOT / "docs" / "design.md").read_text("utf-8")
    table = design[design.index("**outbox_core** holds") : design.index("**producer_lib**")]
    return {f"outbox_core.{name}" for name in re.findall(r"`(\w+)\.py`", table)}


def parsed(source: Path) -> ast.Module:
    """The file's syntax tree, parsed on a thread of its own. CPython 3.11's AST builder
    checks its recursion count against the thread's; once in CI, after other tests on the
    same worker, ast.parse raised "SystemError: AST constructor recursion depth mismatch"
    for a sound file. A new thread starts from a clean count."""
    found: list[ast.Module] = []
    worker = threading.Thread(
        target=lambda: found.append(ast.parse(source.read_text(), str(source)))
    )
    worker.start()
    worker.join()
    assert found, f"{source} could not be parsed"
    return found[0]


def private_imports(source: Path) -> list[str]:
    """Each import of a library module that is not public, or of a name starting with _."""
    public = PUBLIC | core_modules()
    wrong = []
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.Import):
            found = [(node.lineno, alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [(node.lineno, node.module, alias.name) for alias in node.names]
        else:
            continue
        for line, module, name in found:
            if module.split(".")[0] not in LIBRARIES:
                continue
            parts = [*module.split("."), *([name] if name else [])]
            if module not in public or any(p.startswith("_") for p in parts):
                wrong.append(f"{line}: {module}" + (f" import {name}" if name else ""))
    return wrong


def test_bench_imports_only_public_names_of_the_libraries() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted((ROOT / "bench").rglob("*.py"))
        for where in private_imports(path)
    ]
    assert wrong == []


def test_a_private_import_is_found(tmp_path: Path) -> None:
    source = tmp_path / "bench_x.py"
    source.write_text(
        "from relay.ops.metrics import BatchHistogram\n"
        "from relay.transport import _LIMIT, KafkaPublisher\n"
        "import consumer_lib.database\n"
        "from producer_lib import Outbox\n"
        "from outbox_core.queries import query\n"
        "from outbox_core.executors import _bind\n"
        "import psycopg\n"
    )
    assert private_imports(source) == [
        "1: relay.ops.metrics import BatchHistogram",
        "2: relay.transport import _LIMIT",
        "3: consumer_lib.database",
        "6: outbox_core.executors import _bind",
    ]


def test_every_bench_module_is_in_the_registry_and_runs_from_it() -> None:
    modules = {p.stem for p in (ROOT / "bench").glob("*.py")} - NOT_BENCHES
    assert modules == {b.name for b in BENCHES}
    assert len(BENCHES) == len(modules)
    for bench in BENCHES:
        assert callable(importlib.import_module(f"bench.{bench.name}").main), bench.name


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.name)
def test_each_bench_feeds_a_section_of_the_docs(bench: object) -> None:
    from bench.registry import Bench

    assert isinstance(bench, Bench)
    page, _, anchor = bench.docs.partition("#")
    assert page == DOCS
    assert anchor in anchors(ROOT / DOCS)
    assert bench.question.endswith("?")
    # The docs show how to run it through the entry point.
    assert f"python -m bench {bench.name}" in (ROOT / DOCS).read_text("utf-8")


def test_the_listing_names_each_bench_its_question_and_its_section(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 0
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out == (listing() + "\n") * 2
    for bench in BENCHES:
        assert f"{bench.name}\n    {bench.question}\n    {bench.docs}\n" in out


@pytest.mark.parametrize("name", ["nosuch", "registry", "shared", "../relay", "", "-x"])
def test_an_unknown_bench_is_refused_with_the_listing(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([name, "--help"]) == 2
    err = capsys.readouterr().err
    assert f"no bench {name!r}" in err
    assert "relay_compare" in err


def test_a_bench_gets_the_arguments_after_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    module = importlib.import_module("bench.steady_floor")

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setattr(module, "main", fake_main)
    assert main(["steady_floor", "--gather-s", "0.5"]) == 7
    assert seen == [["--gather-s", "0.5"]]


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({}, [], "--database-url and --bootstrap not given"),
        ({"DATABASE_URL": "postgresql://u@h/d"}, [], "--bootstrap not given"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "h:1"}, ["--database-url", ""], "--database-url not given"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "h:1"}, ["--database-url", "sqlite:///x.db"], "Postgres"),
        ({}, ["--database-url", "postgresql://u@h/d", "--bootstrap", "h:1", "--fleets", "a"], "--fleets"),
    ],
)  # fmt: skip
def test_the_shared_flags_refuse_missing_or_wrong_services(
    env: dict[str, str],
    argv: list[str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import relay_fleet

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        relay_fleet.parse_args(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_the_shared_flags_take_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import relay_fleet

    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/d")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "h:1")
    args = relay_fleet.parse_args(["--fleets", "1,3", "--rate", "200"])
    assert (args.database_url, args.bootstrap) == ("postgresql://u@h/d", "h:1")
    assert (args.fleets, args.rate, args.partitions, args.keys) == ([1, 3], 200.0, 6, 1000)
