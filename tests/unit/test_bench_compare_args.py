"""bench/relay_compare.py writes docs/benchmarks.md only from a run of the whole
comparison: a partial run (a few contenders, to check one change) used to replace the
table with its own rows and drop the others' numbers."""

from __future__ import annotations

import pytest

from bench.compare.cli import parse_args
from bench.compare.common import FULL_RUN


def test_a_full_run_writes_the_docs_and_measures_latency_of_both_relays() -> None:
    args = parse_args([], None)
    assert list(args.contenders) == list(FULL_RUN)
    assert args.write_docs
    assert args.latency_contenders == ["ours", "debezium"]


def test_a_partial_run_leaves_the_docs_and_debezium_alone() -> None:
    args = parse_args(["--contenders", "ceiling,kafka,ours"], None)
    assert not args.write_docs
    assert args.latency_contenders == ["ours"]


def test_what_is_asked_for_explicitly_still_wins() -> None:
    args = parse_args(
        ["--contenders", "ours", "--write-docs", "--latency-contenders", "ours,debezium"], None
    )
    assert args.write_docs
    assert args.latency_contenders == ["ours", "debezium"]


def test_the_ci_check_never_writes_the_docs() -> None:
    args = parse_args(["--ci"], None)
    assert not args.write_docs
    assert not args.latency


def test_the_floor_pair_is_loaded_as_the_relays_are_when_named() -> None:
    args = parse_args(
        ["--contenders", "ours,floor,floor-mariadb", "--mariadb-url", "mysql://u:p@h/"], None
    )
    assert args.latency_contenders == ["ours", "floor", "floor-mariadb"]
    assert "floor" not in parse_args([], None).latency_contenders


@pytest.mark.parametrize(
    "hostile",
    [
        ["--contenders", "Floor"],
        ["--contenders", "floor-postgres"],
        ["--contenders", "floor;floor-mariadb"],
        ["--contenders", "floor", "--latency-contenders", "floor,naive"],
        # The MariaDB floor needs a server to run on, as ours-mariadb does.
        ["--contenders", "floor-mariadb", "--mariadb-url", ""],
        ["--contenders", "floor", "--latency-contenders", "floor-mariadb", "--mariadb-url", ""],
    ],
)
def test_the_compare_bench_refuses_a_floor_it_cannot_run(
    hostile: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(hostile, None)
    assert exit_.value.code == 2
    assert "floor" in capsys.readouterr().err.lower()
