"""bench/large_events.py's retention modes: every round runs each one named, against that
round's broker run, and a mode the relay does not have is refused before anything starts."""

from __future__ import annotations

import pytest

from bench.large_events import parse_args


def test_the_relay_s_default_mode_alone_unless_asked() -> None:
    assert parse_args([]).retentions == ["keep"]
    assert parse_args(["--retentions", "keep,delete"]).retentions == ["keep", "delete"]


@pytest.mark.parametrize("hostile", ["", ",", "keep,forever", "KEEP", "keep;delete"])
def test_a_mode_the_relay_does_not_have_is_refused(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--retentions", hostile])
    assert exit_.value.code == 2
    assert "--retentions" in capsys.readouterr().err
