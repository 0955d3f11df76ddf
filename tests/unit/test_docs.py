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
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

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
# when) belongs in git and the changelog; what a measurement decided, in docs/decisions.
_HISTORY = re.compile(
    r"\bissues? #?\d+\b|\bthis session\b|`(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?:-dirty)?`",
    re.IGNORECASE,
)


def test_the_docs_tell_no_history() -> None:
    found = {n: where for n, where in _named(_HISTORY).items()}
    assert found == {}, (
        "issue numbers, commit hashes or session notes in the user docs (move them to "
        "the commit message, or what they decided to a record in docs/decisions):\n"
        + "\n".join(f"{name}: {', '.join(where)}" for name, where in sorted(found.items()))
    )


# Each measured figure is stated once, in docs/benchmarks.md (its Summary and the sections
# behind it, each with its command and machine); every other user doc links there instead
# of restating figures that then drift. docs/decisions keep the measurement behind each
# decision. A figure: a number with a ratio, time, share, size or rate unit. What the
# other docs may state are configuration values, defaults and limits, listed here with
# what they are.
FIGURE_FREE_DOCS = [
    doc
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if doc.name != "benchmarks.md"
]
_NUMBER = r"\d[\d,]*(?:\.\d+)?(?:\s?(?:-|to)\s?\d[\d,]*(?:\.\d+)?)?"
_FIGURE = re.compile(
    rf"(?<![\w.]){_NUMBER}\s?"
    r"(?:x\b|\u00d7|%"
    r"|(?:µs|us|ms|s|seconds|minutes)\b"
    r"|(?:KiB|MiB|GiB|KB|MB|GB|buffers)\b"
    r"|k?\s?[a-z]+(?:/s\b|\s+a\s+second\b))"
)
CONFIGURATION_FIGURES = {
    "1 MiB": "consumer batch_max_bytes default",
    "16 MiB": "claim_max_bytes default",
    "64 MiB": "a raised claim_max_bytes in the chart's sizing example",
    "144 MiB": "the chart's requests.memory default",
    "288 MiB": "the chart's limits.memory default",
    "384 MiB": "the chart's memory limit for a consumer",
    "8 KiB": "the largest header line the health endpoint reads",
    "16 KiB": "the record batch size where a topic's max.message.bytes cannot be read",
    "64 KiB": "retention_move_max_bytes default",
    "5 x": "the memory sizing rule, base + 5 x claim_max_bytes (the claims and copies held)",
    "10 ms": "probe_gather_s default; the rotation interval of a test",
    "5 ms": "probe_interval_s default",
    "50 ms": "probe_idle_interval_s default",
    "20 ms": "the purge round's pause between two tries of a skipped partition",
    "100 ms": "how long a cycle waits for a new topic's lookup",
    "0.5 s": "purge_lock_timeout_s default",
    "1 s": "the smallest history partition width",
    "5 seconds": "how long the health endpoint waits for a whole request",
    "10 s": "pool_timeout_s default; the topic re-lookup and pool backoff restart intervals",
    "20 s": "shutdown_grace_s default",
    "30 s": "database_statement_timeout_s default; a consumer's stop wait past shutdown_grace_s",
    "60 s": "claim_floor_rescan_s default",
    "300 s": "healthz_stall_s default",
    "5 minutes": "the OutboxOldestPendingEventOld alert's threshold",
    "10 minutes": "horizon_warn_age_s default; the stalled-publishing and dead-letter alerts' window",
    "15 minutes": "the OutboxRelayLeaseChurn alert's window",
    "30 minutes": "the OutboxDatabaseHorizonOld alert's delay",
    "10%": "Postgres's autovacuum_analyze_scale_factor default",
    "20%": "Postgres's autovacuum_vacuum_scale_factor default",
    "2,000 probes a second": "100 idle pods at probe_idle_interval_s, arithmetic",
}


def stated_figures(pages: list[Path]) -> dict[str, list[str]]:
    """Each figure the pages state outside code blocks and the allow-list, with where."""
    found: dict[str, list[str]] = {}
    for page in pages:
        for number, line in _prose_lines(page.read_text("utf-8")):
            for m in _FIGURE.finditer(line):
                figure = re.sub(r"\s+", " ", m.group())
                if figure not in CONFIGURATION_FIGURES:
                    found.setdefault(figure, []).append(f"{_rel(page)}:{number}")
    return found


def test_the_user_docs_state_no_measured_figures() -> None:
    found = stated_figures(FIGURE_FREE_DOCS)
    assert found == {}, (
        "measured figures in the user docs: state them in docs/benchmarks.md (the Summary "
        "or the section with the run's command and machine) and link to that section; a "
        "configuration value belongs in CONFIGURATION_FIGURES with what it is:\n"
        + "\n".join(f"{figure}: {', '.join(where)}" for figure, where in sorted(found.items()))
    )


def test_a_stated_figure_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "PsycopgAsync applies 3.1x the events/s of a plain consumer, 0.83x a batched one.\n"
        "p99 7.3-13.7 ms at 500 to 5,000 events/s, 7.6 µs an event, 20-33% of a core.\n"
        "54,283 events/s; 1,500 events a second; peak RSS 112-120 MiB.\n"
        "Defaults: `probe_interval_s` (5 ms), `retention_move_max_bytes` (64 KiB).\n"
        "```\nbench 4.2x in a code block\n```\n"
    )
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert sorted(stated_figures([page])) == [
        "0.83x",
        "1,500 events a second",
        "112-120 MiB",
        "20-33%",
        "3.1x",
        "500 to 5,000 events/s",
        "54,283 events/s",
        "7.3-13.7 ms",
        "7.6 µs",
    ]
