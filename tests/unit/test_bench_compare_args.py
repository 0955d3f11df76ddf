"""bench/relay_compare.py writes docs/benchmarks.md only from a run of the whole
comparison: a partial run (a few contenders, to check one change) used to replace the
table with its own rows and drop the others' numbers."""

from __future__ import annotations

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
