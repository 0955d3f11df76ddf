"""The README's steps as the tests run them: code blocks of one section, read from the file,
so a step that changes in the README changes in the test (and the reverse)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    language: str
    text: str

    def commands(self) -> list[str]:
        """Shell lines without comments, continuation lines joined."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        lines = (line.split(" #", 1)[0].strip() for line in joined.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def section(heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    text = README.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    rest = text[start + len(heading) + 2 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.MULTILINE)]
    return rest[: ends[0]] if ends else rest


def blocks(heading: str, after: str | None = None) -> list[Block]:
    """The section's code blocks (those after the sentence `after`, when given)."""
    text = section(heading)
    if after is not None:
        text = text[text.index(after) :]
    return [Block(m.group(1), m.group(2)) for m in _BLOCK.finditer(text)]
