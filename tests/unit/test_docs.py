"""The user docs (README.md, docs/*.md) against the code: every relative link and anchor
resolves, every OUTBOX_* variable they name is a setting (or a variable the scripts
read), every setting is documented somewhere, and every metric they name is one the
code exports. Each failure names what is missing and where."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ENV = re.compile(r"\bOUTBOX_[A-Z0-9_]*[A-Z0-9]\b")
# Metric names: the relay's, the Kafka consumer's and the Redis consumer's prefixes.
_METRIC = re.compile(r"\boutbox_(?:relay|consumer|redis_consumer)_[a-z0-9_]*[a-z0-9]\b")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """Lines outside fenced code blocks, numbered from 1."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed
    (hyphens and underscores kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _number, line in _prose_lines(path.read_text("utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text("utf-8")):
        out.add(m.group(1))
    return out


def _links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in _prose_lines(path.read_text("utf-8")):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for m in _LINK.finditer(line):
            yield number, m.group(1) or m.group(2)


def dead_links() -> list[str]:
    dead = []
    for doc in DOCS:
        for number, target in _links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{_rel(doc)}:{number}: {target}"
            if not linked.exists():
                dead.append(f"{where} (no file {file_part})")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                dead.append(f"{where} (no heading #{anchor} in {_rel(linked)})")
    return dead


def test_every_relative_link_and_anchor_resolves() -> None:
    dead = dead_links()
    assert dead == [], "dead links:\n" + "\n".join(dead)


def _setting_env_names() -> set[str]:
    from consumer_lib.environment import COMMAND_ONLY
    from consumer_lib.environment import ENV_PREFIX as CONSUMER
    from consumer_lib.environment import settings_fields as consumer_fields
    from relay.config import ENV_PREFIX as RELAY
    from relay.config import settings_fields as relay_fields

    names = {f.env(RELAY) for f in relay_fields()}
    names |= {f.env(CONSUMER) for f in consumer_fields()}
    names |= {f"{CONSUMER}{name}" for name in COMMAND_ONLY}
    return names


def _script_env_names() -> set[str]:
    """OUTBOX_* variables the scripts, benches and test harness read (services, caches,
    ports, workers): quoted in Python, $NAME or `export NAME=` in the shell scripts."""
    names: set[str] = set()
    quoted = re.compile(r"[\"'](OUTBOX_[A-Z0-9_]*[A-Z0-9])[\"']")
    shell = re.compile(r"(?:\$\{?|export )(OUTBOX_[A-Z0-9_]*[A-Z0-9])")
    for folder in ("scripts", "bench", "tests/support"):
        for source in (ROOT / folder).rglob("*"):
            if source.suffix == ".py":
                names |= set(quoted.findall(source.read_text()))
            elif source.is_file() and source.suffix == "" and source.parent.name == "scripts":
                names |= set(shell.findall(source.read_text()))
    return names


def _named(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    """Each name the pattern finds in the docs, with where (file:line) it is."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for number, line in enumerate(doc.read_text("utf-8").splitlines(), 1):
            for m in pattern.finditer(line):
                found.setdefault(m.group(), []).append(f"{_rel(doc)}:{number}")
    return found


def test_every_variable_the_docs_name_exists() -> None:
    known = _setting_env_names() | _script_env_names()
    unknown = {n: where for n, where in _named(_ENV).items() if n not in known}
    assert unknown == {}, "OUTBOX_* variables named in the docs that no setting has:\n" + "\n".join(
        f"{name}: {', '.join(where)}" for name, where in sorted(unknown.items())
    )


def test_every_setting_is_documented() -> None:
    documented = set(_named(_ENV))
    missing = sorted(_setting_env_names() - documented)
    assert missing == [], (
        "settings documented nowhere in README.md or docs/*.md (the relay's belong in the "
        "table at the end of docs/relay.md: scripts/settings_table.py; the consumer's in "
        "docs/consumer.md: scripts/settings_table.py consumer):\n" + "\n".join(missing)
    )


def exported_metric_names() -> set[str]:
    """What a scrape shows: counters with _total, histograms as their base name and its
    series, gauges as they are."""
    from consumer_lib.metrics import ConsumerMetrics
    from consumer_lib.redis_metrics import RedisSourceMetrics
    from relay.ops.metrics import RelayMetrics

    names: set[str] = set()
    for registry in (
        RelayMetrics().registry,
        ConsumerMetrics().registry,
        RedisSourceMetrics().registry,
    ):
        for family in registry.collect():
            if family.type in ("histogram", "gauge", "summary"):
                names.add(family.name)
            names |= {s.name for s in family.samples}
            if family.type == "counter":
                names |= {f"{family.name}_total", f"{family.name}_created"}
            if family.type == "histogram":
                names |= {f"{family.name}_{part}" for part in ("bucket", "count", "sum", "created")}
    return names


def _table_names() -> set[str]:
    from outbox_core.tables import metadata

    return set(metadata.tables)


def test_every_metric_the_docs_name_is_exported() -> None:
    exported = exported_metric_names()
    tables = _table_names()
    unknown = {
        n: where for n, where in _named(_METRIC).items() if n not in exported and n not in tables
    }
    assert unknown == {}, (
        "metric names in the docs that the code does not export (a counter is scraped as "
        "<name>_total):\n"
        + "\n".join(f"{name}: {', '.join(where)}" for name, where in sorted(unknown.items()))
    )


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Consuming exactly once (consumer_lib)", "consuming-exactly-once-consumer_lib"),
        ("2. The chart as a Deployment", "2-the-chart-as-a-deployment"),
        ("`outbox-relay parked retry`", "outbox-relay-parked-retry"),
        ("Limits & tuning: what, why?", "limits--tuning-what-why"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_dead_link_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md)\n```\n[x](in-code.md)\n```\n"
    )
    monkeypatch.setattr(__import__(__name__, fromlist=["DOCS"]), "DOCS", [doc])
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert dead_links() == [
        "doc.md:3: #nope (no heading #nope in doc.md)",
        "doc.md:3: missing.md (no file missing.md)",
    ]


# The docs speak to users: the project's history (issue numbers, commits, who ran what
# when) belongs in git, the changelog and bench/NOTES.md.
_HISTORY = re.compile(
    r"\bissues? #?\d+\b|\bthis session\b|`(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?:-dirty)?`",
    re.IGNORECASE,
)


def test_the_docs_tell_no_history() -> None:
    found = {n: where for n, where in _named(_HISTORY).items()}
    assert found == {}, (
        "issue numbers, commit hashes or session notes in the user docs (move them to "
        "bench/NOTES.md or the commit message):\n"
        + "\n".join(f"{name}: {', '.join(where)}" for name, where in sorted(found.items()))
    )
